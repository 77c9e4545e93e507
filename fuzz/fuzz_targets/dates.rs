//! Every date form haul reads (haul_time).
//! The body is `haul_fuzz_targets::dates`, which the workspace's corpus replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| haul_fuzz_targets::dates(data));
