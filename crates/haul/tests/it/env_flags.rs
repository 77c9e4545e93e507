//! `HAUL_<FLAG>`: every long flag also from the environment (rclone's
//! `RCLONE_<FLAG>`), the command line winning over it and it over the
//! client config; `haul config show` lists what is set.

use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(60);

fn tree(s: &Scratch) {
    write_file(&s.path("src/a.bin"), 70_000, 1);
    write_file(&s.path("src/x.log"), 100, 2);
}

fn copy(s: &Scratch, env: &[(&str, &str)], args: &[&str], dest: &str) -> std::process::Output {
    let mut c = haul(&s.path("cfg"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.arg("pull")
        .args(args)
        .arg(s.path("src/"))
        .arg(s.path(dest));
    run(c, T)
}

#[test]
fn switches_and_values_come_from_the_environment_and_the_command_line_wins() {
    let s = Scratch::new();
    tree(&s);
    // HAUL_DRY_RUN=yes: a dry run; =0: a copy.
    let out = copy(&s, &[("HAUL_DRY_RUN", "yes")], &[], "dry");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(!s.path("dry/a.bin").exists(), "HAUL_DRY_RUN=yes copied");
    let out = copy(&s, &[("HAUL_DRY_RUN", "0")], &[], "wet");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(b3(&s.path("wet/a.bin")), b3(&s.path("src/a.bin")));

    // A value: HAUL_LOG_FILE alone is used; --log-file beats it.
    let (a, b) = (s.path("a.log"), s.path("b.log"));
    let out = copy(&s, &[("HAUL_LOG_FILE", a.to_str().unwrap())], &[], "one");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let logged = std::fs::read_to_string(&a).unwrap_or_default();
    assert!(
        logged.contains("a.bin"),
        "HAUL_LOG_FILE was not read: {logged:?}"
    );
    std::fs::remove_file(&a).unwrap();
    let out = copy(
        &s,
        &[("HAUL_LOG_FILE", a.to_str().unwrap())],
        &["--log-file", b.to_str().unwrap()],
        "two",
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(b.exists() && !a.exists(), "the command line did not win");

    // Filter rules are the command line's alone (their order matters).
    let out = copy(&s, &[("HAUL_EXCLUDE", "*.log")], &[], "three");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(s.path("three/x.log").exists(), "HAUL_EXCLUDE was read");

    // A bad value names its variable.
    let out = copy(&s, &[("HAUL_TIMEOUT", "soon")], &[], "four");
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("HAUL_TIMEOUT"), "{}", said(&out));
}

#[test]
fn the_environment_beats_the_config_file_and_config_show_lists_it() {
    let s = Scratch::new();
    let client = s.path("cfg");
    std::fs::create_dir_all(&client).unwrap();
    std::fs::write(
        client.join("config.toml"),
        "[node.one]\nurl = \"haul://127.0.0.1:7001\"\nfingerprint = \"SHA256:fromthefile\"\ntransport = \"quic\"\n",
    )
    .unwrap();
    let show = |env: &[(&str, &str)], args: &[&str]| {
        let mut c = haul(&client);
        for (k, v) in env {
            c.env(k, v);
        }
        c.args(["config", "show", "--json"]).args(args);
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(0), "{}", said(&out));
        serde_json::from_str::<serde_json::Value>(String::from_utf8_lossy(&out.stdout).trim())
            .unwrap()
    };
    let plain = show(&[], &[]);
    assert_eq!(plain["nodes"][0]["fingerprint"], "SHA256:fromthefile");
    assert_eq!(plain["environment"], serde_json::json!([]), "{plain}");
    let env = [
        ("HAUL_FINGERPRINT", "SHA256:fromtheenv"),
        ("HAUL_TRANSPORT", "tcp"),
        ("HAUL_JOBS", "3"),
        ("HAUL_TOKEN", "sekrit"),
    ];
    let shown = show(&env, &[]);
    assert_eq!(
        shown["nodes"][0]["fingerprint"], "SHA256:fromtheenv",
        "{shown}"
    );
    assert_eq!(shown["nodes"][0]["transport"], "tcp", "{shown}");
    let vars = shown["environment"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["variable"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {shown}"))
    };
    assert_eq!(var("HAUL_JOBS")["value"], "3");
    assert!(var("HAUL_JOBS")["flags"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("haul push --jobs")));
    assert_eq!(var("HAUL_TOKEN")["value"], "(set)", "a secret was shown");
    assert!(!shown.to_string().contains("sekrit"));
    // The command line beats both.
    let flagged = show(&env, &["--fingerprint", "SHA256:fromtheflag"]);
    assert_eq!(flagged["nodes"][0]["fingerprint"], "SHA256:fromtheflag");
}

#[test]
fn a_value_checked_after_parsing_names_its_variable_and_conflicts_stay_the_command_lines() {
    let s = Scratch::new();
    tree(&s);
    let out = copy(&s, &[("HAUL_MAX_RATE", "fast")], &[], "one");
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("HAUL_MAX_RATE"), "{}", said(&out));
    // --checksum conflicts with --size-only: it is not read from the
    // environment, so a typed --size-only is never refused over it.
    let out = copy(&s, &[("HAUL_CHECKSUM", "1")], &["--size-only"], "two");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    // Removing and config flags are the command line's only.
    let out = copy(
        &s,
        &[("HAUL_DELETE", "1"), ("HAUL_CONFIG", "/nonexistent")],
        &[],
        "three",
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
}
