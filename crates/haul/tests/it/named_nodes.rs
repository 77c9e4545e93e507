//! Named nodes in the client's config file (`[node.NAME]`): `haul://NAME/PATH`
//! reaches each node with its own token, so one fan-out reaches nodes with
//! different tokens; `--token`/`HAUL_TOKEN` is for the nodes without one
//! and never reaches a named node (real `haul serve` nodes on 127.0.0.1).

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(60);

#[test]
fn named_nodes_take_their_own_tokens_in_a_fan_out_a_push_a_pull_and_ls() {
    let s = Scratch::new();
    write_file(&s.path("src/a.bin"), 3000, 1);
    let one = Node::start(
        &s.path("one"),
        &s.path("config"),
        &["--plaintext", "--token", "t-one"],
    );
    let two = Node::start(
        &s.path("two"),
        &s.path("config"),
        &["--plaintext", "--token", "t-two"],
    );
    let client = s.path("client");
    std::fs::create_dir_all(&client).unwrap();
    for (name, token) in [("one", "t-one"), ("two", "t-two")] {
        let f = client.join(format!("{name}.token"));
        std::fs::write(&f, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    std::fs::write(
        client.join("config.toml"),
        format!(
            "[node.one]\nurl = \"haul://{}\"\ntoken_file = \"one.token\"\n\n[node.two]\nurl = \"haul://{}\"\ntoken_file = \"{}\"\n",
            one.addr,
            two.addr,
            client.join("two.token").display()
        ),
    )
    .unwrap();
    let from = format!("{}/", s.path("src").display());
    // The default file ($HAUL_CONFIG_DIR/config.toml): a fan-out to both.
    let mut c = haul(&client);
    c.args([
        "push",
        "--plaintext",
        &from,
        "haul://one/fan",
        "haul://two/fan",
    ]);
    ok(&run(c, T));
    for node in ["one", "two"] {
        assert_eq!(
            b3(&s.path(&format!("{node}/fan/a.bin"))),
            b3(&s.path("src/a.bin"))
        );
    }
    // A push to one, a pull from the other, ls.
    let mut c = haul(&client);
    c.args(["push", "--plaintext", &from, "haul://one/single"]);
    ok(&run(c, T));
    assert!(s.path("one/single/a.bin").exists());
    let mut c = haul(&client);
    c.args(["pull", "--plaintext", "haul://two/fan/"])
        .arg(s.path("back"));
    ok(&run(c, T));
    assert_eq!(b3(&s.path("back/a.bin")), b3(&s.path("src/a.bin")));
    let mut c = haul(&client);
    c.args(["ls", "--plaintext", "haul://one/fan/"]);
    let out = run(c, T);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("a.bin"));

    // `haul config show` says which file and how each node is reached.
    let mut c = haul(&client);
    c.args(["config", "show", "--json"]);
    let out = run(c, T);
    ok(&out);
    let shown: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(shown["nodes"].as_array().map(Vec::len), Some(2), "{shown}");
    assert_eq!(shown["nodes"][0]["name"], "one");
    assert_eq!(shown["nodes"][0]["url"], format!("haul://{}", one.addr));
    assert!(shown["nodes"][1]["token"]
        .as_str()
        .unwrap()
        .ends_with("two.token"));
    let mut c = haul(&client);
    c.args(["config", "show", "--token", "x"]);
    let out = run(c, T);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("file "));

    // Without the file the tokens are missing: refused (exit 5). A
    // HAUL_TOKEN left in the environment (here a wrong one) is not sent to
    // a named node: the node's own file is its token.
    let mut c = haul(&s.path("elsewhere"));
    c.args(["push", "--plaintext", &from]).arg(one.url("nope"));
    assert_eq!(run(c, T).status.code(), Some(5));
    let mut c = haul(&client);
    c.env("HAUL_TOKEN", "wrong")
        .args(["push", "--plaintext", &from, "haul://one/env"]);
    ok(&run(c, T));
    assert!(s.path("one/env/a.bin").exists());
    // A table whose token file is missing stops only commands that name
    // its node: a fan-out to the other two goes on.
    let extra = format!(
        "{}\n[node.broken]\nurl = \"haul://127.0.0.1:9\"\ntoken_file = \"missing.token\"\n",
        std::fs::read_to_string(client.join("config.toml")).unwrap()
    );
    std::fs::write(client.join("config.toml"), extra).unwrap();
    let mut c = haul(&client);
    c.args([
        "push",
        "--plaintext",
        &from,
        "haul://one/fan2",
        "haul://two/fan2",
    ]);
    ok(&run(c, T));
    let mut c = haul(&client);
    c.args(["push", "--plaintext", &from, "haul://broken/x"]);
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("[node.broken]"), "{}", said(&out));
    // --config names another file; a node table with a path is refused.
    let bad = s.path("bad.toml");
    std::fs::write(&bad, "[node.x]\nurl = \"haul://127.0.0.1:9/with/path\"\n").unwrap();
    let mut c = haul(&client);
    c.args(["push", "--plaintext", "--config"])
        .arg(&bad)
        .args([&from, "haul://x/d"]);
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("without a path"), "{}", said(&out));
}
