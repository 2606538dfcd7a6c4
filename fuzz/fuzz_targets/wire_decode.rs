//! The wire codec on arbitrary bytes: decoding never panics, and whatever
//! decodes is canonical — it re-encodes to exactly the input bytes, and those
//! decode to the same message.

#![no_main]

use coral::dsht::wire::Message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = Message::decode(data) else {
        return;
    };
    let mut bytes = Vec::with_capacity(data.len());
    msg.encode(&mut bytes);
    assert_eq!(bytes, data, "decoded {msg:?} but it re-encodes differently");
    assert_eq!(Message::decode(&bytes).as_ref(), Ok(&msg));
});
