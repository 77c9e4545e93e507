//! Feeds arbitrary bytes to the frame decoder: it must never panic, and any
//! message it accepts must encode back to the same bytes.
#![no_main]

use haul_proto::{decode_frame, encode, Decoded};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Decoded::Message(msg, used)) = decode_frame(data) {
        let mut again = Vec::new();
        encode(&msg, &mut again);
        assert_eq!(&again[..], &data[..used]);
    }
});
