//! Any bytes as the body of a POST to the conversion webhook: what the handler does with a body
//! that deserializes (the JSON extractor refuses the rest), and the answer serializes again.
#![no_main]
use capd::webhook::review;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = serde_json::from_slice(data) {
        let answer = review(body);
        let _ = serde_json::to_vec(&answer);
    }
});
