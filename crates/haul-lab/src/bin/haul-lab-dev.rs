//! A stand-alone runner of `haul lab` for developing the lab before the
//! `haul` binary exists: `haul-lab-dev lab up --hosts 3`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "haul-lab-dev", about = "haul lab, stand-alone")]
struct Cli {
    #[command(subcommand)]
    cmd: Top,
}

#[derive(clap::Subcommand)]
enum Top {
    /// The lab commands (same as `haul lab`).
    Lab(haul_lab::cli::LabArgs),
}

fn main() {
    let Top::Lab(args) = Cli::parse().cmd;
    if let Err(e) = haul_lab::cli::run(args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
