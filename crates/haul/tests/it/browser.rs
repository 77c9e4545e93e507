//! A real browser for the console's tests: Debian's `chromium`, headless,
//! driven through `chromedriver` over the W3C WebDriver protocol.
//!
//! The protocol is a handful of JSON requests over HTTP/1.1 to a server on
//! 127.0.0.1, so it is spoken here directly (std's TcpStream and
//! serde_json): the WebDriver crates (fantoccini) bring a second `http`, a
//! second `cookie` and ICU generation, and aws-lc-sys, all for five calls.
//!
//! The browser can reach loopback only: every other host resolves to
//! nothing and every other request goes to a proxy on a closed loopback
//! port, and its background services (updates, safe browsing, sync,
//! metrics) are off — no address but 127.0.0.1 is ever a target.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The key WebDriver names an element reference by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium session; chromedriver is killed and waited for on
/// drop (and the session ended first).
pub(crate) struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

/// An element on the page.
pub(crate) struct Element(String);

impl Browser {
    /// Starts chromedriver and a Chromium session `width`x`height`, its
    /// profile in `profile`.
    pub(crate) fn start(profile: &Path, width: u32, height: u32) -> Browser {
        let port = crate::daemon::free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            // Its own process group: Chromium and its helpers are killed
            // with it.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian package chromium-driver; scripts/test.sh installs it)");
        let mut b = Browser {
            driver,
            port,
            session: String::new(),
        };
        crate::harness::wait_for(Duration::from_secs(30), "chromedriver to listen", || {
            b.call("GET", "/status", None)
                .is_ok_and(|v| v["value"]["ready"] == json!(true))
        });
        let args = [
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-gpu".into(),
            format!("--user-data-dir={}", profile.display()),
            format!("--window-size={width},{height}"),
            "--no-first-run".into(),
            "--no-default-browser-check".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-extensions".into(),
            "--disable-default-apps".into(),
            "--disable-client-side-phishing-detection".into(),
            "--disable-domain-reliability".into(),
            "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication".into(),
            "--no-pings".into(),
            "--proxy-server=http://127.0.0.1:9".into(),
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1".into(),
            "--force-device-scale-factor=1".into(),
        ];
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": "/usr/bin/chromium", "args": args },
        } } });
        let answer = b
            .call("POST", "/session", Some(caps))
            .expect("a Chromium session");
        b.session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_string();
        b
    }

    /// One WebDriver request; the answer's JSON, or the error it reports.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(90))).ok();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )
        .map_err(|e| e.to_string())?;
        // chromedriver may keep the connection open: read the headers,
        // then the body's length (or chunks up to the last one).
        let mut raw = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        let body = loop {
            let n = s.read(&mut buf).map_err(|e| e.to_string())?;
            raw.extend_from_slice(&buf[..n]);
            let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                if n == 0 {
                    return Err("no HTTP answer".into());
                }
                continue;
            };
            let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
            let rest = &raw[split + 4..];
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            match length {
                Some(len) if rest.len() >= len => break rest[..len].to_vec(),
                None if head.contains("transfer-encoding: chunked")
                    && rest.windows(5).any(|w| w == b"0\r\n\r\n") =>
                {
                    break dechunk(rest)
                }
                _ if n == 0 => break rest.to_vec(),
                _ => {}
            }
        };
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&body)))?;
        if v["value"]["error"].is_string() {
            return Err(format!(
                "{}: {}",
                v["value"]["error"], v["value"]["message"]
            ));
        }
        Ok(v)
    }

    fn session_call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let p = format!("/session/{}{path}", self.session);
        self.call(method, &p, body)
            .unwrap_or_else(|e| panic!("webdriver {method} {path}: {e}"))
    }

    /// Opens `url`.
    pub(crate) fn goto(&self, url: &str) {
        self.session_call("POST", "/url", Some(json!({ "url": url })));
    }

    /// The elements `css` selects now.
    pub(crate) fn all(&self, css: &str) -> Vec<Element> {
        let v = self.session_call(
            "POST",
            "/elements",
            Some(json!({ "using": "css selector", "value": css })),
        );
        v["value"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(|s| Element(s.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The element `css` selects (panics when none).
    pub(crate) fn find(&self, css: &str) -> Element {
        self.all(css)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no element {css:?} on the page:\n{}", self.text("body")))
    }

    /// The rendered text of the first element `css` selects ("" when
    /// none), read in one step (the page may replace its content between
    /// two).
    pub(crate) fn text(&self, css: &str) -> String {
        self.eval_with(
            "var e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
            json!([css]),
        )
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// Clicks `e`.
    pub(crate) fn click(&self, e: &Element) {
        self.session_call("POST", &format!("/element/{}/click", e.0), Some(json!({})));
    }

    /// Types `keys` into `e` (`\u{E007}` is Enter).
    pub(crate) fn type_into(&self, e: &Element, keys: &str) {
        self.session_call(
            "POST",
            &format!("/element/{}/value", e.0),
            Some(json!({ "text": keys })),
        );
    }

    /// Runs `script` in the page and returns its value.
    pub(crate) fn eval(&self, script: &str) -> Value {
        self.eval_with(script, json!([]))
    }

    fn eval_with(&self, script: &str, args: Value) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )["value"]
            .clone()
    }

    /// Waits up to `limit` for the text of `css` to contain `needle`.
    pub(crate) fn wait_text(&self, css: &str, needle: &str, limit: Duration) {
        let t0 = Instant::now();
        loop {
            if self.text(css).contains(needle) {
                return;
            }
            assert!(
                t0.elapsed() < limit,
                "{css:?} never said {needle:?} in {limit:?}; the page says:\n{}",
                self.text("body")
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// A PNG of the window.
    pub(crate) fn screenshot(&self) -> Vec<u8> {
        let v = self.session_call("GET", "/screenshot", None);
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(v["value"].as_str().unwrap_or_default())
            .expect("a base64 screenshot")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        unsafe { libc::kill(-(self.driver.id() as i32), libc::SIGKILL) };
        let _ = self.driver.wait();
    }
}

/// A chunked body, joined.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&rest[..end]);
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        let tail = &rest[end + 2..];
        if n == 0 || tail.len() < n {
            break;
        }
        out.extend_from_slice(&tail[..n]);
        rest = tail[n..].strip_prefix(b"\r\n").unwrap_or(&tail[n..]);
    }
    out
}
