//! An S3 ListObjectsV2 page (haul_s3::xml::parse_list).
//! The body is `haul_fuzz_targets::s3_list_xml`, which the workspace's corpus replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| haul_fuzz_targets::s3_list_xml(data));
