//! FTP control replies and passive-mode replies (haul_ftp::reply).
//! The body is `haul_fuzz_targets::ftp_reply`, which the workspace's corpus replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| haul_fuzz_targets::ftp_reply(data));
