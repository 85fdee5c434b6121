//! Provider IDs: `openstack:///<server id>` (and the regional `openstack://<region>/<id>`).

/// The provider ID berth writes for a server.
pub fn format(server_id: &str) -> String {
    format!("openstack:///{server_id}")
}

/// The server id in a provider ID, checked against our region.
///
/// Accepts `openstack:///<id>`, `openstack://<region>/<id>` (the region must be ours) and, as
/// upstream does, a bare id. Anything else is `Err` with the reason.
pub fn parse<'a>(provider_id: &'a str, our_region: Option<&str>) -> Result<&'a str, String> {
    let Some(rest) = provider_id.strip_prefix("openstack://") else {
        if provider_id.contains("://") {
            return Err(format!(
                "provider ID {provider_id:?} is not an OpenStack one (openstack:///<id>)"
            ));
        }
        return non_empty(provider_id);
    };
    let (region, id) = rest.split_once('/').unwrap_or(("", rest));
    if !region.is_empty()
        && let Some(ours) = our_region
        && region != ours
    {
        return Err(format!(
            "provider ID {provider_id:?} is in region {region}, this controller serves {ours}"
        ));
    }
    non_empty(id)
}

fn non_empty(id: &str) -> Result<&str, String> {
    if id.is_empty() || id.contains('/') {
        Err(format!("provider ID has no server id: {id:?}"))
    } else {
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_upstream_accepts() {
        assert_eq!(parse("openstack:///abc", Some("R1")), Ok("abc"));
        assert_eq!(parse("openstack://R1/abc", Some("R1")), Ok("abc"));
        assert_eq!(parse("abc", None), Ok("abc"));
        assert!(
            parse("openstack://R2/abc", Some("R1"))
                .unwrap_err()
                .contains("region R2")
        );
        assert!(parse("aws:///abc", None).is_err());
        assert!(parse("openstack:///", None).is_err());
        assert_eq!(format("abc"), "openstack:///abc");
    }
}
