//! The little x86_64 machine code the unwinder decodes: whether the bytes
//! before a return address end with a call instruction, and where a
//! direct call goes.

/// The target of the `E8 rel32` call that ends `code`, which ends right
/// before `ra`; `None` if `code` does not end with one.
pub(crate) fn direct_call_target(code: &[u8], ra: u64) -> Option<u64> {
    let n = code.len();
    if n < 5 || code[n - 5] != 0xe8 {
        return None;
    }
    let rel = i32::from_le_bytes(code[n - 4..].try_into().ok()?);
    Some(ra.wrapping_add_signed(i64::from(rel)))
}

/// Whether `code` ends with an x86_64 near call: `E8 rel32`, or `FF /2`
/// with any ModRM addressing form (`call *%rax`, `call *0x10(%rbx)`,
/// `call *disp(%rip)`, ...).
pub(crate) fn ends_with_call(code: &[u8]) -> bool {
    let n = code.len();
    if n >= 5 && code[n - 5] == 0xe8 {
        return true;
    }
    (2..=7).any(|len| {
        n >= len
            && code[n - len] == 0xff
            && ff2_len(code[n - len + 1], code.get(n - len + 2).copied()) == Some(len)
    })
}

/// The length of an `FF /2` (indirect call) instruction from its ModRM
/// byte and the byte after it (the SIB byte, where there is one); `None`
/// when the ModRM byte is not that of a call.
fn ff2_len(modrm: u8, sib: Option<u8>) -> Option<usize> {
    if (modrm >> 3) & 7 != 2 {
        return None;
    }
    let (mode, rm) = (modrm >> 6, modrm & 7);
    let mut len = 2;
    if mode != 3 && rm == 4 {
        len += 1;
        if mode == 0 && sib? & 7 == 5 {
            len += 4;
        }
    }
    match mode {
        0 if rm == 5 => len += 4,
        1 => len += 1,
        2 => len += 4,
        _ => {}
    }
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_instructions_are_recognised_before_a_return_address() {
        let calls: [&[u8]; 8] = [
            &[0xe8, 1, 2, 3, 4],             // call rel32
            &[0xff, 0xd1],                   // call *%rcx
            &[0x41, 0xff, 0xd3],             // call *%r11
            &[0xff, 0x50, 0x18],             // call *0x18(%rax)
            &[0xff, 0x14, 0x24],             // call *(%rsp)
            &[0xff, 0x54, 0x24, 0x08],       // call *0x8(%rsp)
            &[0xff, 0x15, 1, 2, 3, 4],       // call *disp(%rip)
            &[0xff, 0x94, 0xc8, 1, 2, 3, 4], // call *disp(%rax,%rcx,8)
        ];
        for call in calls {
            let mut code = vec![0x90; 8 - call.len()];
            code.extend_from_slice(call);
            assert!(ends_with_call(&code), "{call:02x?}");
        }
        let not_calls: [&[u8]; 5] = [
            &[0x48, 0x83, 0xc4, 0x08], // add $8,%rsp
            &[0xff, 0xe0],             // jmp *%rax (FF /4)
            &[0xff, 0xc0],             // inc %eax (FF /0)
            &[0xff, 0x50],             // a call cut short of its disp8
            &[0x90, 0x90, 0x90],
        ];
        for code in not_calls {
            assert!(!ends_with_call(code), "{code:02x?}");
        }
    }
}
