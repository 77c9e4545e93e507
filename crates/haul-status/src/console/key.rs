//! The guard on a console's actions. Reading the console needs nothing
//! (as `/status` and `/metrics`); acting — run a source now, retry, pause —
//! needs the console's token, presented once:
//!
//! - in a browser, at `/?token=TOKEN` (the link the daemon prints at start)
//!   or through the page's "unlock" form, which sets a cookie (`HttpOnly`,
//!   `SameSite=Strict`, named after the listener's port: browsers share a
//!   host's cookies among its ports) holding a key derived from the token
//!   and a random value drawn at start — never the token itself, and
//!   worthless once the process restarts;
//! - from a script, as `Authorization: Bearer TOKEN` on each `POST`.
//!
//! A `POST` carried by a cookie must also come from the console's own page:
//! `Sec-Fetch-Site: same-origin` (or `none`: typed by the user), else an
//! `Origin` equal to `http://` and the request's `Host`. A request with
//! neither is refused unless it carries the bearer token (browsers send
//! one of them on every `POST`; a page elsewhere cannot set
//! `Authorization` without a CORS preflight the listener never grants).
//! Comparisons go through BLAKE3 digests, whose equality is constant time.

use crate::{Asked, Method, Page};

/// How an action proved it holds the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `Authorization: Bearer` (a script: answered with text, not a redirect).
    Bearer,
    /// The console's cookie, from its own page (a browser).
    Cookie,
}

/// Why an action was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or a wrong one.
    Locked,
    /// A cookie from a page that is not the console's.
    CrossOrigin,
}

impl Refusal {
    /// The 403 page that says so and what to do.
    pub fn page(&self) -> Page {
        let text = match self {
            Refusal::Locked => {
                "actions need the console's token: open /?token=TOKEN once (the daemon prints \
                 the link at start; status_token in its config sets it), or send \
                 Authorization: Bearer TOKEN\n"
            }
            Refusal::CrossOrigin => {
                "refused: this action did not come from the console's own page (Origin and \
                 Sec-Fetch-Site say another site); use the buttons on the console\n"
            }
        };
        Page::text(403, text)
    }
}

/// A console's token and the cookie derived from it.
#[derive(Clone)]
pub struct ConsoleKey {
    token: String,
    /// The cookie's name (`haul_console_PORT`).
    name: String,
    /// Its value.
    cookie: String,
}

impl std::fmt::Debug for ConsoleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConsoleKey(…)")
    }
}

fn same(a: &str, b: &str) -> bool {
    blake3::hash(a.as_bytes()) == blake3::hash(b.as_bytes())
}

impl ConsoleKey {
    /// The key of `token` for the listener on `port`.
    pub fn new(token: &str, port: u16) -> std::io::Result<Self> {
        let nonce = random_hex()?;
        let cookie = blake3::derive_key(
            "haul console cookie 2026-12",
            format!("{nonce}\n{token}").as_bytes(),
        );
        Ok(Self {
            token: token.to_owned(),
            name: format!("haul_console_{port}"),
            cookie: blake3::Hash::from(cookie).to_hex().to_string(),
        })
    }

    /// A key with a fresh random token (128 bits, hex).
    pub fn generate(port: u16) -> std::io::Result<Self> {
        Self::new(&random_hex()?, port)
    }

    /// The token (to print once at start).
    pub fn token(&self) -> &str {
        &self.token
    }

    fn bearer(&self, asked: &Asked) -> bool {
        asked
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| same(t.trim(), &self.token))
    }

    fn cookie(&self, asked: &Asked) -> bool {
        asked
            .headers
            .iter()
            .filter(|(n, _)| n == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .any(|(n, v)| n == self.name && same(v, &self.cookie))
    }

    /// Whether `asked` holds the token (bearer or cookie): the page shows
    /// its buttons.
    pub fn unlocks(&self, asked: &Asked) -> bool {
        self.bearer(asked) || self.cookie(asked)
    }

    /// Whether `asked` came from the console's own page.
    fn same_origin(asked: &Asked) -> bool {
        if let Some(site) = asked.header("sec-fetch-site") {
            return site == "same-origin" || site == "none";
        }
        match (asked.header("origin"), asked.header("host")) {
            (Some(origin), Some(host)) => origin == format!("http://{host}"),
            _ => false,
        }
    }

    /// Checks an action: the bearer token, or the cookie from the
    /// console's own page.
    pub fn check(&self, asked: &Asked) -> Result<Via, Refusal> {
        if self.bearer(asked) {
            return Ok(Via::Bearer);
        }
        if !self.cookie(asked) {
            return Err(Refusal::Locked);
        }
        if !Self::same_origin(asked) {
            return Err(Refusal::CrossOrigin);
        }
        Ok(Via::Cookie)
    }

    /// Answers the ways to unlock and lock a browser: `GET /?token=T`,
    /// `POST /login` (form field `token`), `POST /logout`. `None`: `asked`
    /// is none of them.
    pub fn login(&self, asked: &Asked) -> Option<Page> {
        let offered = match (asked.method, asked.path.as_str()) {
            (Method::Get | Method::Head, "/") => form_value(asked.query.as_deref()?, "token")?,
            (Method::Post, "/login") => {
                if !Self::same_origin(asked) {
                    return Some(Refusal::CrossOrigin.page());
                }
                form_value(&String::from_utf8_lossy(&asked.body), "token").unwrap_or_default()
            }
            (Method::Post, "/logout") => {
                if !Self::same_origin(asked) {
                    return Some(Refusal::CrossOrigin.page());
                }
                return Some(Page::see_other("/").with_header(
                    "set-cookie",
                    format!(
                        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
                        self.name
                    ),
                ));
            }
            _ => return None,
        };
        if !same(offered.trim(), &self.token) {
            return Some(Page::see_other("/?said=bad-token"));
        }
        Some(Page::see_other("/?said=unlocked").with_header(
            "set-cookie",
            format!(
                "{}={}; Path=/; HttpOnly; SameSite=Strict",
                self.name, self.cookie
            ),
        ))
    }
}

/// 128 random bits as hex.
fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The first value of `name` in a form-encoded `text`.
pub fn form_value(text: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(text.as_bytes())
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(path: &str, headers: &[(&str, &str)], body: &str) -> Asked {
        let mut a = Asked::get(path);
        a.method = Method::Post;
        a.headers = headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        a.body = body.as_bytes().to_vec();
        a
    }

    fn cookie_of(page: &Page) -> String {
        let set = page
            .headers
            .iter()
            .find(|(n, _)| *n == "set-cookie")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        set.split(';').next().unwrap_or_default().to_owned()
    }

    #[test]
    fn a_token_unlocks_and_only_from_the_consoles_own_page() {
        let key = ConsoleKey::new("s3cret-token", 9464).unwrap();
        let page = key.login(&Asked::get("/?token=s3cret-token")).unwrap();
        assert_eq!(page.status, 303);
        let cookie = cookie_of(&page);
        assert!(cookie.starts_with("haul_console_9464=") && !cookie.contains("s3cret"));
        // Another start (or another port) does not take this cookie.
        let restarted = ConsoleKey::new("s3cret-token", 9464).unwrap();
        let again = post(
            "/sources/a/run",
            &[("cookie", &cookie), ("sec-fetch-site", "same-origin")],
            "",
        );
        assert_eq!(restarted.check(&again), Err(Refusal::Locked));
        let wrong = key.login(&Asked::get("/?token=nope")).unwrap();
        assert!(cookie_of(&wrong).is_empty());
        assert!(key.login(&Asked::get("/")).is_none());

        let host = ("host", "127.0.0.1:9464");
        let own = post(
            "/sources/a/run",
            &[host, ("cookie", &cookie), ("sec-fetch-site", "same-origin")],
            "",
        );
        assert_eq!(key.check(&own), Ok(Via::Cookie));
        let by_origin = post(
            "/sources/a/run",
            &[
                host,
                ("cookie", &cookie),
                ("origin", "http://127.0.0.1:9464"),
            ],
            "",
        );
        assert_eq!(key.check(&by_origin), Ok(Via::Cookie));
        let elsewhere = post(
            "/sources/a/run",
            &[host, ("cookie", &cookie), ("sec-fetch-site", "cross-site")],
            "",
        );
        assert_eq!(key.check(&elsewhere), Err(Refusal::CrossOrigin));
        let other_origin = post(
            "/sources/a/run",
            &[host, ("cookie", &cookie), ("origin", "http://evil.example")],
            "",
        );
        assert_eq!(key.check(&other_origin), Err(Refusal::CrossOrigin));
        let bare = post("/sources/a/run", &[host, ("cookie", &cookie)], "");
        assert_eq!(key.check(&bare), Err(Refusal::CrossOrigin));
        let none = post(
            "/sources/a/run",
            &[host, ("sec-fetch-site", "same-origin")],
            "",
        );
        assert_eq!(key.check(&none), Err(Refusal::Locked));
        let forged = post(
            "/sources/a/run",
            &[
                host,
                ("cookie", "haul_console=00"),
                ("sec-fetch-site", "same-origin"),
            ],
            "",
        );
        assert_eq!(key.check(&forged), Err(Refusal::Locked));
        let script = post(
            "/sources/a/run",
            &[("authorization", "Bearer s3cret-token")],
            "",
        );
        assert_eq!(key.check(&script), Ok(Via::Bearer));
        let form = post(
            "/login",
            &[host, ("origin", "http://127.0.0.1:9464")],
            "token=s3cret-token",
        );
        assert_eq!(cookie_of(&key.login(&form).unwrap()), cookie);
        let generated = ConsoleKey::generate(9464).unwrap();
        assert_eq!(generated.token().len(), 32);
        assert_ne!(
            generated.token(),
            ConsoleKey::generate(9464).unwrap().token()
        );
    }
}
