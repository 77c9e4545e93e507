//! FTP LIST (Unix, DOS) and MLSD lines (haul_ftp::listing).
//! The body is `haul_fuzz_targets::ftp_list`, which the workspace's corpus replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| haul_fuzz_targets::ftp_list(data));
