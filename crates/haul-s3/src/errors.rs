//! Mapping transport errors and S3 `<Error>` answers onto [`RemoteError`].

use haul_remote::RemoteError;
use reqwest::StatusCode;

/// A transport error, without the URL (it may carry a token).
pub(crate) fn net_error(e: reqwest::Error, what: &str) -> RemoteError {
    let e = e.without_url();
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    if e.is_timeout() {
        RemoteError::Timeout(format!("{what}: {msg}"))
    } else {
        RemoteError::Connection(format!("{what}: {msg}"))
    }
}

/// Maps an S3 error (status, `<Code>`, `<Message>`) onto a [`RemoteError`].
pub(crate) fn classify(
    status: StatusCode,
    code: Option<&str>,
    message: Option<&str>,
    what: &str,
    region: &str,
    bucket_region: Option<&str>,
) -> RemoteError {
    let detail = match (code, message) {
        (Some(c), Some(m)) => format!("{what}: {status} {c}: {m}"),
        (Some(c), None) => format!("{what}: {status} {c}"),
        (None, Some(m)) => format!("{what}: {status}: {m}"),
        (None, None) => format!("{what}: {status}"),
    };
    let region_hint = match bucket_region {
        Some(r) => format!("the bucket is in region {r}: pass --s3-region {r}"),
        None => format!("requests are signed for region {region}: check --s3-region / AWS_REGION"),
    };
    match code.unwrap_or("") {
        "NoSuchKey" | "NotFound" | "NoSuchVersion" => RemoteError::NotFound(detail),
        "NoSuchBucket" => RemoteError::NotFound(format!("{detail} (check the bucket name)")),
        "AccessDenied" | "AllAccessDisabled" | "AccountProblem" => RemoteError::PermissionDenied(
            format!("{detail} (the credentials lack permission, or the bucket is not public)"),
        ),
        "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "ExpiredToken" | "InvalidToken"
        | "TokenRefreshRequired" | "InvalidSecurity" | "MissingSecurityHeader" => {
            RemoteError::Auth(format!(
                "{detail} (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or the AWS profile)"
            ))
        }
        "AuthorizationHeaderMalformed" | "PermanentRedirect" | "IllegalLocationConstraintException" => {
            RemoteError::Auth(format!("{detail} ({region_hint})"))
        }
        "RequestTimeTooSkewed" => {
            RemoteError::Auth(format!("{detail} (the local clock is wrong: fix it, e.g. with NTP)"))
        }
        "PreconditionFailed" | "InvalidRange" => RemoteError::Changed(detail),
        "SlowDown" | "InternalError" | "ServiceUnavailable" | "RequestTimeout" => {
            RemoteError::Protocol(format!("{detail} (temporary; retrying)"))
        }
        _ => match status.as_u16() {
            404 => RemoteError::NotFound(detail),
            401 => RemoteError::Auth(detail),
            403 => RemoteError::PermissionDenied(detail),
            412 | 416 => RemoteError::Changed(detail),
            301 | 307 => RemoteError::Auth(format!("{detail} ({region_hint})")),
            _ => RemoteError::Protocol(detail),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_mapping() {
        let c = |s: u16, code: Option<&str>| {
            classify(
                StatusCode::from_u16(s).unwrap(),
                code,
                Some("m"),
                "op",
                "us-east-1",
                None,
            )
        };
        assert!(matches!(
            c(404, Some("NoSuchKey")),
            RemoteError::NotFound(_)
        ));
        assert!(matches!(
            c(403, Some("AccessDenied")),
            RemoteError::PermissionDenied(_)
        ));
        assert!(matches!(
            c(403, Some("InvalidAccessKeyId")),
            RemoteError::Auth(_)
        ));
        assert!(matches!(
            c(403, Some("SignatureDoesNotMatch")),
            RemoteError::Auth(_)
        ));
        assert!(matches!(c(412, None), RemoteError::Changed(_)));
        assert!(matches!(c(503, Some("SlowDown")), RemoteError::Protocol(_)));
        assert!(matches!(c(500, None), RemoteError::Protocol(_)));
        assert!(c(503, Some("SlowDown")).is_retryable());
        assert!(matches!(
            c(400, Some("AuthorizationHeaderMalformed")),
            RemoteError::Auth(_)
        ));
    }
}
