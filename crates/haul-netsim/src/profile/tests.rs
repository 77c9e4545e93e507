use super::*;

#[test]
fn units() {
    assert_eq!(parse_time("50ms"), Some(50_000_000));
    assert_eq!(parse_time("1.5s"), Some(1_500_000_000));
    assert_eq!(parse_time("250us"), Some(250_000));
    assert_eq!(parse_time("7"), Some(7_000));
    assert_eq!(parse_time("5parsecs"), None);
    assert_eq!(parse_bit_rate("200mbit"), Some(200_000_000));
    assert_eq!(parse_bit_rate("1Gbit"), Some(1_000_000_000));
    assert_eq!(parse_bit_rate("10mbps"), Some(80_000_000));
    assert_eq!(parse_bit_rate("1kibit"), Some(1024));
    assert_eq!(parse_bit_rate("fast"), None);
    assert_eq!(parse_percent("5%"), Some(0.05));
    assert_eq!(parse_percent("0.5"), Some(0.005));
    assert_eq!(parse_percent("101%"), None);
}

#[test]
fn the_issue_example() {
    let p = Profile::parse(
        "rate 200mbit delay 50ms 5ms loss 5% corrupt 1% reorder 10% 50% duplicate 2%",
    )
    .unwrap();
    assert_eq!(p.rate_bps, Some(200_000_000));
    assert_eq!(p.delay_ns, 50_000_000);
    assert_eq!(p.jitter_ns, 5_000_000);
    assert_eq!(p.loss, Loss::Random(Chance { p: 0.05, corr: 0.0 }));
    assert_eq!(p.corrupt.p, 0.01);
    assert_eq!(p.reorder.chance, Chance { p: 0.10, corr: 0.5 });
    assert_eq!(p.reorder.gap, 1);
    assert_eq!(p.duplicate.p, 0.02);
}

#[test]
fn delay_with_correlation_and_distribution() {
    let p = Profile::parse("delay 100ms 10ms 25% distribution normal").unwrap();
    assert_eq!(p.jitter_ns, 10_000_000);
    assert_eq!(p.delay_corr, 0.25);
    assert_eq!(p.distribution, Distribution::Normal);
}

#[test]
fn reorder_gap_and_gemodel() {
    let p = Profile::parse("delay 10ms reorder 25% 50% gap 5").unwrap();
    assert_eq!(p.reorder.gap, 5);
    let p = Profile::parse("loss gemodel 1% 10% 70% 0.1%").unwrap();
    assert_eq!(
        p.loss,
        Loss::Gemodel {
            p: 0.01,
            r: 0.10,
            bad_loss: 0.70,
            good_loss: 0.001
        }
    );
    // netem's defaults: r = 1 - p, 1-h = 100 %, 1-k = 0 %.
    let p = Profile::parse("loss gemodel 2%").unwrap();
    assert_eq!(
        p.loss,
        Loss::Gemodel {
            p: 0.02,
            r: 0.98,
            bad_loss: 1.0,
            good_loss: 0.0
        }
    );
    assert!((p.loss.mean() - 0.02).abs() < 1e-12);
    assert!(Profile::parse("loss random 3% 25%").is_ok());
}

#[test]
fn named_profiles_parse_and_override() {
    for n in NAMED_PROFILES {
        let p = Profile::parse(n.name).unwrap_or_else(|e| panic!("{}: {e}", n.name));
        assert_eq!(p, Profile::parse(n.spec).unwrap());
    }
    let p = Profile::parse("wan-50ms loss 1%").unwrap();
    assert_eq!(p.delay_ns, 25_000_000);
    assert_eq!(p.loss, Loss::Random(Chance { p: 0.01, corr: 0.0 }));
    assert!(Profile::parse("clean").unwrap().is_clean());
    assert!(Profile::parse("").unwrap().is_clean());
    assert!(Profile::parse("none").unwrap().is_clean());
}

#[test]
fn errors_say_what_is_wrong() {
    let e = Profile::parse("loss 5% wobble 3").unwrap_err();
    assert!(e.reason.contains("wobble"), "{e}");
    assert!(Profile::parse("rate").unwrap_err().reason.contains("end"));
    assert!(Profile::parse("reorder 5%")
        .unwrap_err()
        .reason
        .contains("delay"));
    assert!(Profile::parse("loss state 1 2 3").is_err());
    assert!(Profile::parse("delay 10ms distribution weird").is_err());
}

#[test]
fn display_round_trips() {
    for spec in [
        "rate 200mbit delay 50ms 5ms loss 5% corrupt 1% reorder 10% 50% duplicate 2%",
        "delay 100ms 10ms 25% distribution pareto",
        "loss gemodel 1% 10% 70% 0.1%",
        "rate 1500kbit limit 50 delay 250us",
        "delay 10ms reorder 25% gap 5",
        "",
    ] {
        let p = Profile::parse(spec).unwrap();
        let text = p.to_string();
        assert_eq!(Profile::parse(&text).unwrap(), p, "{spec} -> {text}");
    }
    for n in NAMED_PROFILES {
        let p = Profile::parse(n.name).unwrap();
        assert_eq!(Profile::parse(&p.to_string()).unwrap(), p);
    }
}
