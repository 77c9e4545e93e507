//! The daemon's console in a real browser (Debian's chromium, headless,
//! through chromedriver: `browser.rs`) against a real daemon fetching from
//! a real nginx: a failing source turns red with its error text, a failed
//! file is listed with its own error, actions need the token (typed with
//! the keyboard), "Retry failed" re-queues the file and it arrives, pause
//! and resume, the page fits a phone's width, and the content is all in
//! the HTML before any script runs. Screenshots are kept in
//! `$CARGO_TARGET_TMPDIR/console/` (the desktop one is README's
//! `docs/console.png`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::browser::Browser;
use crate::daemon::{catalog, free_port, wait_seeing, Daemon};
use crate::harness::{b3, http_get, http_post, wait_for, write_file, Scratch};

const TOKEN: &str = "console-test-token-0123";

/// `POST /act` with `headers` (raw, as a page elsewhere or a script would
/// send it): the status line and body.
pub(crate) fn post_act(port: u16, headers: &str, form: &str) -> (String, String) {
    http_post(port, "/act", headers, form)
}

fn state_of(config: &Path, path: &str) -> String {
    catalog(config, &["list"])
        .iter()
        .find(|r| r["path"] == path)
        .map(|r| r["state"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

fn keep(png: &[u8], name: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&dir).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    std::fs::write(dir.join(name), png).unwrap();
    eprintln!("screenshot: {}", dir.join(name).display());
}

#[test]
fn the_console_shows_failures_and_its_actions_need_the_token() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    let archive = http.root().join("sst");
    write_file(&archive.join("a.nc"), 300_000, 1);
    write_file(&archive.join("b.nc"), 200_000, 2);
    // nginx's workers cannot read it: GET answers 403 while it is so.
    std::fs::set_permissions(archive.join("b.nc"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let port = free_port();
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "127.0.0.1:{port}"
status_token = "{TOKEN}"
down_retry = "10m"

[[source]]
name = "sst"
url = "{sst}"
dest = "{dest}"
schedule = "every 1h"

[[source]]
name = "radar"
url = "{denied}"
dest = "{dest2}"
schedule = "every 1h"
"#,
            cat = s.path("catalog.db").display(),
            sst = http.http_url("/sst/"),
            denied = http.http_url("/denied/"),
            dest = s.path("sst").display(),
            dest2 = s.path("radar").display(),
        ),
    )
    .unwrap();
    let daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_for(Duration::from_secs(30), "sst's first run", || {
        daemon.log().contains("sst: run ended")
    });
    wait_seeing(
        &daemon,
        Duration::from_secs(30),
        "a.nc fetched, b.nc failed",
        || state_of(&config, "a.nc") == "fetched" && state_of(&config, "b.nc") == "failed",
    );
    wait_for(Duration::from_secs(30), "radar down", || {
        http_get(port, "/status").1.contains("\"down_for\":1")
    });

    // Everything is in the HTML itself, before any script runs.
    let (line, html) = http_get(port, "/");
    assert!(line.contains("200"), "{line}");
    assert!(
        html.contains("files failing") && html.contains(">down<"),
        "{html}"
    );
    assert!(html.contains("b.nc") && html.contains("403"), "{html}");
    assert!(
        !html.contains("Retry failed"),
        "no buttons without the token: {html}"
    );

    let url = format!("http://127.0.0.1:{port}/");
    let browser = Browser::start(&s.path("profile"), 1280, 1000);
    browser.goto(&url);
    // Auto-refresh off (the tab remembers) while the test clicks: it is
    // switched on below where it is what is tested.
    let refresh = "#refresh button";
    browser.wait_text(refresh, "on", Duration::from_secs(10));
    browser.click(&browser.find(refresh));
    browser.wait_text(refresh, "off", Duration::from_secs(10));
    // The source that cannot be listed is red and says why (nginx's 403).
    assert_eq!(browser.text("#source-radar .badge"), "down");
    assert_eq!(
        browser.eval(
            "return getComputedStyle(document.querySelector('#source-radar .badge')).backgroundColor"
        ),
        serde_json::json!("rgb(192, 28, 40)")
    );
    assert!(
        browser.text("#source-radar td.err").contains("403"),
        "{}",
        browser.text("#source-radar")
    );
    assert_eq!(browser.text("#source-sst .badge"), "files failing");
    let failed = browser.text("#failed + .scroll");
    assert!(
        failed.contains("b.nc") && failed.contains("403"),
        "{failed}"
    );
    assert_eq!(
        browser.all("button[type=submit]").len(),
        1,
        "only the unlock button"
    );
    keep(&browser.screenshot(), "console-read-only.png");

    // Actions without the token, or from another site's page, are refused.
    let form = "action=retry&source=sst";
    let (line, body) = post_act(port, "", form);
    assert!(
        line.contains("403") && body.contains("token"),
        "{line} {body}"
    );
    let (line, _) = post_act(port, "Authorization: Bearer wrong-token-000000\r\n", form);
    assert!(line.contains("403"), "{line}");
    assert_eq!(state_of(&config, "b.nc"), "failed");

    // Unlocked with the keyboard: type the token, press Enter.
    let field = browser.find("#token");
    browser.type_into(&field, &format!("{TOKEN}\u{E007}"));
    browser.wait_text(
        "#main",
        "Unlocked: the buttons act now.",
        Duration::from_secs(10),
    );
    assert!(browser.text("#source-sst").contains("Retry failed"));
    keep(&browser.screenshot(), "console.png");

    // The file becomes readable; "Retry failed" re-queues it and it arrives.
    std::fs::set_permissions(archive.join("b.nc"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let retry = browser.find("#source-sst form:has(input[value=retry]) button");
    browser.click(&retry);
    browser.wait_text(
        "#main",
        "1 failed file(s) due again",
        Duration::from_secs(10),
    );
    wait_for(Duration::from_secs(30), "b.nc to arrive", || {
        let there = s.path("sst/b.nc");
        there.exists() && b3(&there) == b3(&archive.join("b.nc"))
    });
    // The page refreshes itself: the source turns green without a reload,
    // and the notice stays.
    browser.click(&browser.find(refresh));
    browser.wait_text(refresh, "on", Duration::from_secs(10));
    browser.wait_text("#source-sst .badge", "ok", Duration::from_secs(20));
    assert!(!browser.text("#main").contains("Failed files"));
    assert!(browser.text("#main").contains("1 failed file(s) due again"));
    browser.click(&browser.find(refresh));
    browser.wait_text(refresh, "off", Duration::from_secs(10));

    // Pause and resume.
    browser.click(&browser.find("#source-sst form:has(input[value=pause]) button"));
    browser.wait_text("#source-sst .badge", "paused", Duration::from_secs(10));
    assert!(browser.text("#main").contains("sst paused"));
    let (line, body) = post_act(
        port,
        &format!("Authorization: Bearer {TOKEN}\r\n"),
        "action=run&source=sst",
    );
    assert!(
        line.contains("409") && body.contains("resume it first"),
        "{line} {body}"
    );
    browser.click(&browser.find("#source-sst form:has(input[value=resume]) button"));
    browser.wait_text("#main", "sst resumed", Duration::from_secs(10));
    browser.wait_text("#source-sst .badge", "ok", Duration::from_secs(10));

    // A phone's width: the page does not scroll sideways (tables do, in
    // their own boxes).
    drop(browser);
    let phone = Browser::start(&s.path("profile-phone"), 390, 844);
    phone.goto(&url);
    phone.wait_text("#source-sst .badge", "ok", Duration::from_secs(10));
    let fits = phone.eval("return document.documentElement.scrollWidth <= window.innerWidth");
    assert_eq!(
        fits,
        serde_json::json!(true),
        "the page is wider than a phone"
    );
    keep(&phone.screenshot(), "console-phone.png");
    drop(phone);

    let log = daemon.log();
    assert!(
        log.contains("sst: 1 failed file(s) due again (console)"),
        "{log}"
    );
}
