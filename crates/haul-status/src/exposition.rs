//! Prometheus' text exposition format (version 0.0.4): `# HELP`, `# TYPE`
//! and samples with escaped label values. Written by hand: it is a few
//! lines of formatting, and the client crates bring a registry and global
//! state that haul's counters (read at scrape time) do not need.

use std::fmt::Write;

/// A label value escaped as the format asks (`\`, `"`, newline).
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The text of one scrape, built family by family.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a family: its `# HELP` and `# TYPE` (`counter`, `gauge`,
    /// `summary`) lines.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        self
    }

    /// One sample of `name` with `labels` (name, value; values escaped).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
        self
    }

    /// A family of one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: &str, help: &str, value: f64) -> &mut Self {
        self.family(name, kind, help).sample(name, &[], value)
    }

    /// Text written by hand (a family this writer has no shape for).
    pub fn raw(&mut self) -> &mut String {
        &mut self.out
    }

    /// The text.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_escaped_labels() {
        let mut e = Exposition::new();
        e.family("haul_x_total", "counter", "Things.")
            .sample("haul_x_total", &[("cause", "a\"b\\c\nd"), ("k", "v")], 3.0)
            .sample("haul_x_total", &[], 0.5);
        e.single("haul_up", "gauge", "Up.", 1.0);
        assert_eq!(
            e.finish(),
            "# HELP haul_x_total Things.\n# TYPE haul_x_total counter\n\
             haul_x_total{cause=\"a\\\"b\\\\c\\nd\",k=\"v\"} 3\nhaul_x_total 0.5\n\
             # HELP haul_up Up.\n# TYPE haul_up gauge\nhaul_up 1\n"
        );
    }
}
