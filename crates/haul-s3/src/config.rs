//! Where the endpoint, region and credentials come from (no network here).
//!
//! Region: `opts.s3_region`, `$AWS_REGION`, `$AWS_DEFAULT_REGION`, the
//! profile's `region` in `$AWS_CONFIG_FILE` or `~/.aws/config`, else `us-east-1`.
//! Endpoint: `opts.s3_endpoint`, `$AWS_ENDPOINT_URL_S3`, `$AWS_ENDPOINT_URL`,
//! else `https://s3.<region>.amazonaws.com`.
//! Credentials: user + password of the URL or options (access key id + secret),
//! `$AWS_ACCESS_KEY_ID` + `$AWS_SECRET_ACCESS_KEY` (+ `$AWS_SESSION_TOKEN`),
//! the profile (`$AWS_PROFILE` or `default`) in `$AWS_SHARED_CREDENTIALS_FILE`
//! or `~/.aws/credentials` (then the config file), else anonymous.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use haul_remote::{RemoteError, RemoteOptions, RemoteUrl, Secret};

use crate::S3Credentials;

/// What the process environment offers; tests pass their own.
pub(crate) struct Env<'a> {
    /// Looks up an environment variable.
    pub var: &'a dyn Fn(&str) -> Option<String>,
    /// The home directory (for `~/.aws`).
    pub home: Option<PathBuf>,
}

impl Env<'_> {
    fn get(&self, name: &str) -> Option<String> {
        (self.var)(name).filter(|v| !v.trim().is_empty())
    }

    fn profile(&self) -> (String, bool) {
        match self.get("AWS_PROFILE") {
            Some(p) => (p, true),
            None => ("default".into(), false),
        }
    }

    fn file(&self, var: &str, default: &str) -> Option<PathBuf> {
        self.get(var)
            .map(PathBuf::from)
            .or_else(|| self.home.as_ref().map(|h| h.join(".aws").join(default)))
    }
}

/// The sections of an INI file: `[name]` → key → value. Keys are lower-cased,
/// `#`/`;` lines are comments, indented lines (nested settings) are skipped.
pub(crate) fn parse_ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section: Option<String> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            out.entry(name.clone()).or_default();
            section = Some(name);
        } else if let (Some(s), Some((k, v))) = (&section, line.split_once('=')) {
            if let Some(map) = out.get_mut(s) {
                map.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
    }
    out
}

fn read_ini(path: &Path) -> Option<HashMap<String, HashMap<String, String>>> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > 1 << 20 {
        tracing::warn!("ignoring {}: larger than 1 MiB", path.display());
        return None;
    }
    std::fs::read_to_string(path).ok().map(|t| parse_ini(&t))
}

/// The profile's section: `[name]` in the credentials file,
/// `[profile name]` (or `[default]`) in the config file.
fn section(
    ini: &HashMap<String, HashMap<String, String>>,
    profile: &str,
    config_file: bool,
) -> Option<HashMap<String, String>> {
    let named = format!("profile {profile}");
    if config_file {
        ini.get(&named)
            .or_else(|| (profile == "default").then(|| ini.get("default")).flatten())
    } else {
        ini.get(profile)
    }
    .cloned()
}

/// The signing region.
pub(crate) fn region(opts: &RemoteOptions, env: &Env<'_>) -> String {
    if let Some(r) = opts.s3_region.as_ref().filter(|r| !r.trim().is_empty()) {
        return r.trim().to_string();
    }
    if let Some(r) = env
        .get("AWS_REGION")
        .or_else(|| env.get("AWS_DEFAULT_REGION"))
    {
        return r.trim().to_string();
    }
    let (profile, _) = env.profile();
    env.file("AWS_CONFIG_FILE", "config")
        .and_then(|p| read_ini(&p))
        .and_then(|ini| section(&ini, &profile, true))
        .and_then(|s| s.get("region").cloned())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "us-east-1".into())
}

/// The endpoint (scheme, host, port and optional base path) and whether to
/// use path-style addressing.
pub(crate) fn endpoint(
    opts: &RemoteOptions,
    env: &Env<'_>,
    region: &str,
    bucket: &str,
) -> Result<(url::Url, bool), RemoteError> {
    let given = opts
        .s3_endpoint
        .clone()
        .filter(|e| !e.trim().is_empty())
        .or_else(|| env.get("AWS_ENDPOINT_URL_S3"))
        .or_else(|| env.get("AWS_ENDPOINT_URL"));
    let custom = given.is_some();
    let text = given.unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
    // The text is not echoed: it may hold user info.
    let bad = |why: &str| {
        RemoteError::Unsupported(format!(
            "the S3 endpoint {why}: give it as http(s)://host[:port]"
        ))
    };
    let url = url::Url::parse(text.trim()).map_err(|_| bad("is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("is not http or https"));
    }
    if url.query().is_some() || !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not have a query or user info"));
    }
    let host = match url.host() {
        Some(h) => h,
        None => return Err(bad("has no host")),
    };
    let ip_or_port = matches!(host, url::Host::Ipv4(_) | url::Host::Ipv6(_))
        || url.host_str() == Some("localhost")
        || url.port().is_some();
    // A bucket name that is not a DNS label (dots break TLS names, capitals
    // and underscores are not host names) can only be addressed path-style.
    let dns_label = bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    let dns_safe = dns_label && !(bucket.contains('.') && url.scheme() == "https");
    let path_style = opts.s3_path_style || (custom && ip_or_port) || !dns_safe;
    Ok((url, path_style))
}

/// Credentials, in the order the module docs give; `None`: anonymous.
pub(crate) fn credentials(
    url: &RemoteUrl,
    opts: &RemoteOptions,
    env: &Env<'_>,
) -> Result<Option<S3Credentials>, RemoteError> {
    let user = url.user.clone().or_else(|| opts.user.clone());
    let pass = url.password.clone().or_else(|| opts.password.clone());
    if let (Some(id), Some(secret)) = (user, pass) {
        return Ok(Some(S3Credentials::new(id, secret)));
    }
    if let (Some(id), Some(secret)) = (
        env.get("AWS_ACCESS_KEY_ID"),
        env.get("AWS_SECRET_ACCESS_KEY"),
    ) {
        let mut c = S3Credentials::new(id.trim(), Secret::new(secret.trim()));
        c.session_token = env.get("AWS_SESSION_TOKEN").map(|t| Secret::new(t.trim()));
        return Ok(Some(c));
    }
    let (profile, explicit) = env.profile();
    let files = [
        (
            env.file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
            false,
        ),
        (env.file("AWS_CONFIG_FILE", "config"), true),
    ];
    let mut seen = false;
    for (path, is_config) in files {
        let Some(sec) = path
            .and_then(|p| read_ini(&p))
            .and_then(|i| section(&i, &profile, is_config))
        else {
            continue;
        };
        seen = true;
        if let (Some(id), Some(secret)) = (
            sec.get("aws_access_key_id"),
            sec.get("aws_secret_access_key"),
        ) {
            let mut c = S3Credentials::new(id.as_str(), Secret::new(secret.as_str()));
            c.session_token = sec
                .get("aws_session_token")
                .map(|t| Secret::new(t.as_str()));
            return Ok(Some(c));
        }
    }
    if explicit {
        let why = if seen {
            "has no aws_access_key_id / aws_secret_access_key (SSO, roles and credential_process are not supported)"
        } else {
            "is not in the AWS credentials or config file"
        };
        return Err(RemoteError::Auth(format!(
            "AWS profile {profile:?} {why}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or fix AWS_PROFILE"
        )));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREDS: &str = "# comment\n[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key=sekrit/+=x\n\n\
        [work]\n; another\nAWS_ACCESS_KEY_ID = AKIDWORK\naws_secret_access_key = worksecret\naws_session_token = tok\n\
        s3 =\n  addressing_style = path\n[empty]\nregion = x\n";
    const CONFIG: &str = "[default]\nregion = eu-west-3\n[profile work]\nregion = ap-south-1\n";

    fn with_env<T>(vars: &[(&str, &str)], f: impl FnOnce(&Env<'_>) -> T) -> T {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".aws")).unwrap();
        std::fs::write(dir.path().join(".aws/credentials"), CREDS).unwrap();
        std::fs::write(dir.path().join(".aws/config"), CONFIG).unwrap();
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let var = move |k: &str| map.get(k).cloned();
        f(&Env {
            var: &var,
            home: Some(dir.path().to_path_buf()),
        })
    }

    fn s3url() -> RemoteUrl {
        RemoteUrl::parse("s3://bucket/p").unwrap()
    }

    #[test]
    fn ini() {
        let ini = parse_ini(CREDS);
        assert_eq!(ini["default"]["aws_secret_access_key"], "sekrit/+=x");
        assert_eq!(ini["work"]["aws_access_key_id"], "AKIDWORK");
        assert_eq!(ini["work"]["s3"], "");
        assert!(!ini["work"].contains_key("addressing_style"));
        assert_eq!(ini["empty"]["region"], "x");
        assert!(parse_ini("key=before any section\n[a]\n")
            .get("a")
            .unwrap()
            .is_empty());
    }

    #[test]
    fn credential_chain() {
        let o = RemoteOptions::default();
        let c = with_env(&[], |e| credentials(&s3url(), &o, e))
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.access_key_id.as_str(), c.secret_access_key.expose()),
            ("AKIDDEFAULT", "sekrit/+=x")
        );
        let c = with_env(&[("AWS_PROFILE", "work")], |e| credentials(&s3url(), &o, e))
            .unwrap()
            .unwrap();
        assert_eq!(c.access_key_id, "AKIDWORK");
        assert_eq!(c.session_token.unwrap().expose(), "tok");
        let env = [
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "envsecret"),
        ];
        let c = with_env(&env, |e| credentials(&s3url(), &o, e))
            .unwrap()
            .unwrap();
        assert_eq!(c.access_key_id, "AKIDENV");
        assert!(c.session_token.is_none());
        let u = RemoteUrl::parse("s3://AKIDURL:urlsecret@bucket/").unwrap();
        let c = with_env(&env, |e| credentials(&u, &o, e)).unwrap().unwrap();
        assert_eq!(c.access_key_id, "AKIDURL");
        let err =
            with_env(&[("AWS_PROFILE", "nope")], |e| credentials(&s3url(), &o, e)).unwrap_err();
        assert!(matches!(err, RemoteError::Auth(_)), "{err}");
        let err = with_env(&[("AWS_PROFILE", "empty")], |e| {
            credentials(&s3url(), &o, e)
        })
        .unwrap_err();
        assert!(err.to_string().contains("no aws_access_key_id"), "{err}");
        let none = |k: &str| -> Option<String> {
            let _ = k;
            None
        };
        let anon = credentials(
            &s3url(),
            &o,
            &Env {
                var: &none,
                home: None,
            },
        )
        .unwrap();
        assert!(anon.is_none());
        // Secrets never show in Debug.
        let c = with_env(&[], |e| credentials(&s3url(), &o, e))
            .unwrap()
            .unwrap();
        assert!(!format!("{c:?}").contains("sekrit"));
    }

    #[test]
    fn region_chain() {
        let mut o = RemoteOptions::default();
        assert_eq!(with_env(&[], |e| region(&o, e)), "eu-west-3");
        assert_eq!(
            with_env(&[("AWS_PROFILE", "work")], |e| region(&o, e)),
            "ap-south-1"
        );
        assert_eq!(
            with_env(&[("AWS_DEFAULT_REGION", "us-west-2")], |e| region(&o, e)),
            "us-west-2"
        );
        assert_eq!(
            with_env(
                &[("AWS_REGION", "eu-north-1"), ("AWS_DEFAULT_REGION", "x")],
                |e| region(&o, e)
            ),
            "eu-north-1"
        );
        o.s3_region = Some("sa-east-1".into());
        assert_eq!(
            with_env(&[("AWS_REGION", "x")], |e| region(&o, e)),
            "sa-east-1"
        );
        let none = |_: &str| -> Option<String> { None };
        assert_eq!(
            region(
                &RemoteOptions::default(),
                &Env {
                    var: &none,
                    home: None
                }
            ),
            "us-east-1"
        );
    }

    #[test]
    fn endpoints() {
        let none = |_: &str| -> Option<String> { None };
        let env = Env {
            var: &none,
            home: None,
        };
        let mut o = RemoteOptions::default();
        let (u, path) = endpoint(&o, &env, "eu-west-1", "bucket").unwrap();
        assert_eq!(
            (u.as_str(), path),
            ("https://s3.eu-west-1.amazonaws.com/", false)
        );
        assert!(endpoint(&o, &env, "eu-west-1", "my.bucket").unwrap().1);
        o.s3_endpoint = Some("http://127.0.0.1:9000".into());
        assert!(endpoint(&o, &env, "us-east-1", "bucket").unwrap().1);
        o.s3_endpoint = Some("https://minio.example".into());
        assert!(!endpoint(&o, &env, "us-east-1", "bucket").unwrap().1);
        o.s3_path_style = true;
        assert!(endpoint(&o, &env, "us-east-1", "bucket").unwrap().1);
        for bad in ["ftp://x", "not a url", "http://u:p@host/", "http://h/?q=1"] {
            o.s3_endpoint = Some(bad.into());
            assert!(
                matches!(
                    endpoint(&o, &env, "r", "b"),
                    Err(RemoteError::Unsupported(_))
                ),
                "{bad}"
            );
        }
    }
}
