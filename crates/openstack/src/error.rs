//! The one error type of this crate.

use reqwest::{Method, StatusCode};

/// What can go wrong talking to OpenStack.
///
/// Every variant that comes from an API call names the service, the method and the URL path
/// (never the query string's secrets, never a token), so a log line alone says what failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request could not be sent, or no complete answer came back in time.
    #[error("{service} {method} {path}: {source}")]
    Transport {
        /// The catalog service type, e.g. `compute`.
        service: String,
        /// The HTTP method.
        method: Method,
        /// The URL path (no query string).
        path: String,
        /// What reqwest reported.
        #[source]
        source: reqwest::Error,
    },
    /// OpenStack answered with an error status.
    #[error("{service} {method} {path} returned {status}: {message}")]
    Api {
        /// The catalog service type, e.g. `network`.
        service: String,
        /// The HTTP method.
        method: Method,
        /// The URL path (no query string).
        path: String,
        /// The HTTP status.
        status: StatusCode,
        /// OpenStack's own message, taken from the error body.
        message: String,
    },
    /// The answer was not the JSON this client expects.
    #[error("{service} {method} {path}: cannot decode the answer: {source}")]
    Decode {
        /// The catalog service type.
        service: String,
        /// The HTTP method.
        method: Method,
        /// The URL path.
        path: String,
        /// What serde reported.
        #[source]
        source: serde_json::Error,
    },
    /// Keystone refused to issue a token.
    #[error("login to Keystone at {auth_url} failed ({status}): {message}")]
    Auth {
        /// The Keystone URL that was asked.
        auth_url: String,
        /// The HTTP status Keystone answered.
        status: StatusCode,
        /// Keystone's own message.
        message: String,
    },
    /// The service catalog has no endpoint that fits.
    #[error(
        "the service catalog has no {interface} endpoint of type {service_type}{region} (it offers: {available})"
    )]
    NoEndpoint {
        /// The service type asked for.
        service_type: String,
        /// The interface asked for.
        interface: String,
        /// ` in region X`, or empty when no region was asked for.
        region: String,
        /// What the catalog has, as `type/interface/region` entries.
        available: String,
    },
    /// A resource did not reach the wanted state in time.
    #[error("{what} did not become {wanted} within {waited_secs}s (last seen: {last})")]
    WaitTimeout {
        /// The resource, e.g. `load balancer 5f3…`.
        what: String,
        /// The state waited for.
        wanted: String,
        /// How long was waited.
        waited_secs: u64,
        /// The last state seen.
        last: String,
    },
    /// A resource went into an error state while being waited for.
    #[error("{what} went to {state}{reason}")]
    Failed {
        /// The resource.
        what: String,
        /// The state it reached, e.g. `ERROR`.
        state: String,
        /// `: <fault message>` when OpenStack gave one, else empty.
        reason: String,
    },
    /// A setting given to the client is not usable.
    #[error("invalid {what} {value:?}: {reason}")]
    Invalid {
        /// Which setting.
        what: &'static str,
        /// Its value (never a secret).
        value: String,
        /// Why it is refused.
        reason: String,
    },
}

impl Error {
    /// The HTTP status of an [`Error::Api`], if this is one.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Api { status, .. } | Error::Auth { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether OpenStack said the resource does not exist (404).
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(StatusCode::NOT_FOUND)
    }
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Pulls OpenStack's message out of an error body.
///
/// The services disagree on the shape: Keystone sends `{"error": {"message"}}`, Nova
/// `{"itemNotFound": {"message"}}`, Neutron `{"NeutronError": {"message"}}`, Octavia
/// `{"faultstring"}`. Anything else is returned as (shortened) text.
pub(crate) fn message_from_body(body: &str) -> String {
    fn find(v: &serde_json::Value) -> Option<String> {
        let obj = v.as_object()?;
        for key in ["faultstring", "message", "detail"] {
            if let Some(s) = obj.get(key).and_then(|m| m.as_str()) {
                return Some(s.trim().to_owned());
            }
        }
        // one level down: {"itemNotFound": {"message": ...}}
        obj.values().find_map(find)
    }
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body)
        && let Some(m) = find(&v)
    {
        return m;
    }
    let text = body.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    let mut short: String = text.chars().take(300).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_of_each_service_are_found() {
        assert_eq!(
            message_from_body(
                r#"{"error": {"code": 401, "message": "The request you have made requires authentication.", "title": "Unauthorized"}}"#
            ),
            "The request you have made requires authentication."
        );
        assert_eq!(
            message_from_body(
                r#"{"itemNotFound": {"code": 404, "message": "Instance abc could not be found."}}"#
            ),
            "Instance abc could not be found."
        );
        assert_eq!(
            message_from_body(
                r#"{"NeutronError": {"type": "PortNotFound", "message": "Port x could not be found.", "detail": ""}}"#
            ),
            "Port x could not be found."
        );
        assert_eq!(
            message_from_body(
                r#"{"faultcode": "Client", "faultstring": "Load Balancer 1 is immutable and cannot be updated.", "debuginfo": null}"#
            ),
            "Load Balancer 1 is immutable and cannot be updated."
        );
        assert_eq!(
            message_from_body("<html>502 Bad Gateway</html>"),
            "<html>502 Bad Gateway</html>"
        );
        assert_eq!(message_from_body(""), "(empty body)");
        assert!(message_from_body(&"x".repeat(1000)).ends_with('…'));
    }
}
