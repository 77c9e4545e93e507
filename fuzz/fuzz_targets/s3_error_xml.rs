//! An S3 <Error> body (haul_s3::xml::parse_error).
//! The body is `haul_fuzz_targets::s3_error_xml`, which the workspace's corpus replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| haul_fuzz_targets::s3_error_xml(data));
