//! What a Go binary offers the uprobes: where crypto/tls's Read and Write,
//! the runtime's newproc1 and goexit1 start in the file, and where each
//! returns. Go moves goroutine stacks, so a uretprobe (which rewrites the
//! return address on the stack) can crash it; a return is hooked at each
//! RET instruction instead, found by decoding the function (iced-x86: a
//! byte 0xC3 inside another instruction is not a return).
//!
//! Symbols come from the ELF symbol table; a stripped binary (no .symtab)
//! is named as such and its TLS stays encrypted. Only x86_64 with Go's
//! register ABI (Go >= 1.17) is read: the programs take arguments from
//! registers.

use iced_x86::{Decoder, DecoderOptions, Mnemonic};
use object::{Object, ObjectSection, ObjectSymbol};

pub const TLS_WRITE: &str = "crypto/tls.(*Conn).Write";
pub const TLS_READ: &str = "crypto/tls.(*Conn).Read";
pub const NEWPROC1: &str = "runtime.newproc1";
pub const GOEXIT1: &str = "runtime.goexit1";

/// A function's entry and its returns, as offsets in the file, and where
/// its entry probe goes (`probe_at`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    pub entry: u64,
    pub returns: Vec<u64>,
    /// The prologue's `PUSH RBP` where only a stack check comes before it
    /// (the arguments' registers and RSP as at the entry, and reached once
    /// a call: a call that grows its stack runs the check again, not the
    /// push), else the entry. x86's uprobes emulate a probed PUSH and
    /// single-step a CMP (a second trap, a VM exit under a hypervisor):
    /// measured here, 0.75 µs a hit against 9.6 µs (bench/uprobe_trap_cost.sh).
    pub probe_at: u64,
}

/// The hooks a Go binary has: TLS (both or neither) and goroutines (both
/// or neither).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GoFunctions {
    pub tls_write: Option<Function>,
    pub tls_read: Option<Function>,
    pub newproc1: Option<Function>,
    pub goexit1: Option<Function>,
}

/// A Go function's body past this is not one of the four (Read is ~2 KiB
/// of code); a symbol claiming more is corrupt, and is not decoded.
const MAX_FUNCTION_BYTES: u64 = 1 << 20;

/// The error of a file that is no Go binary: nothing to hook, nothing to say.
pub const NOT_GO: &str = "not a Go binary";

/// Reads `data` (an ELF file). Err: not a Go binary whyslow can hook,
/// with why.
pub fn read(data: &[u8]) -> Result<GoFunctions, String> {
    let file = object::File::parse(data).map_err(|_| NOT_GO.to_string())?;
    if file.section_by_name(".gopclntab").is_none()
        && file.section_by_name(".go.buildinfo").is_none()
    {
        return Err(NOT_GO.into());
    }
    if file.architecture() != object::Architecture::X86_64 {
        return Err("not x86_64: its Go functions are not read".into());
    }
    let mut out = GoFunctions::default();
    let mut seen_symbols = false;
    for sym in file.symbols() {
        seen_symbols = true;
        let slot = match sym.name() {
            Ok(TLS_WRITE) => &mut out.tls_write,
            Ok(TLS_READ) => &mut out.tls_read,
            Ok(NEWPROC1) => &mut out.newproc1,
            Ok(GOEXIT1) => &mut out.goexit1,
            _ => continue,
        };
        *slot = function(&file, data, &sym);
    }
    if !seen_symbols {
        return Err("a stripped Go binary (no symbol table): its TLS stays encrypted".into());
    }
    if out.tls_write.is_none() != out.tls_read.is_none() {
        out.tls_write = None;
        out.tls_read = None;
    }
    if out.newproc1.is_none() || out.goexit1.is_none() {
        out.newproc1 = None;
        out.goexit1 = None;
    }
    Ok(out)
}

/// The symbol's entry and returns as file offsets, if its bytes are in
/// the file and it returns at all.
fn function(file: &object::File, data: &[u8], sym: &object::Symbol) -> Option<Function> {
    let size = sym.size();
    if size == 0 || size > MAX_FUNCTION_BYTES {
        return None;
    }
    let section = file.section_by_index(sym.section_index()?).ok()?;
    let (section_offset, section_size) = section.file_range()?;
    let within = sym.address().checked_sub(section.address())?;
    if within.checked_add(size)? > section_size {
        return None;
    }
    let entry = section_offset.checked_add(within)?;
    let start = usize::try_from(entry).ok()?;
    let code = data.get(start..start.checked_add(size as usize)?)?;
    let returns: Vec<u64> = returns(code).into_iter().map(|r| entry + r).collect();
    let probe_at = entry + push_after_stack_check(code).unwrap_or(0);
    (!returns.is_empty()).then_some(Function {
        entry,
        returns,
        probe_at,
    })
}

/// Instructions a Go prologue runs before its `PUSH RBP`: `LEA R12,[RSP-N]`
/// (a big frame), `CMP` against the goroutine's stack bound, the
/// conditional jump to `morestack`.
const MAX_STACK_CHECK: usize = 3;

/// The offset of the `PUSH RBP` that follows Go's stack check, when
/// nothing else comes first: no instruction before it writes RSP or an
/// argument register (only R12 and the flags).
pub fn push_after_stack_check(code: &[u8]) -> Option<u64> {
    use iced_x86::Register;
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    for _ in 0..=MAX_STACK_CHECK {
        if !decoder.can_decode() {
            return None;
        }
        let insn = decoder.decode();
        let allowed = match insn.mnemonic() {
            Mnemonic::Push => return (insn.op0_register() == Register::RBP).then(|| insn.ip()),
            Mnemonic::Cmp => true,
            Mnemonic::Lea => insn.op0_register() == Register::R12,
            // The conditional jump to morestack.
            Mnemonic::Jbe | Mnemonic::Jb | Mnemonic::Ja | Mnemonic::Jae => true,
            _ => false,
        };
        if !allowed {
            return None;
        }
    }
    None
}

/// Offsets of the RET instructions in `code` (x86_64).
pub fn returns(code: &[u8]) -> Vec<u64> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut out = Vec::new();
    while decoder.can_decode() {
        let insn = decoder.decode();
        if insn.mnemonic() == Mnemonic::Ret {
            out.push(insn.ip());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_c3_byte_inside_an_instruction_is_not_a_return() {
        // mov eax, 0xc3c3c3c3; ret; nop; mov rbx, rax; ret
        let code = [
            0xb8, 0xc3, 0xc3, 0xc3, 0xc3, 0xc3, 0x90, 0x48, 0x89, 0xc3, 0xc3,
        ];
        assert_eq!(returns(&code), vec![5, 10]);
    }

    #[test]
    fn the_entry_probe_goes_on_the_push_after_go_s_stack_check() {
        // cmp rsp,[r14+0x10]; jbe +0x40; push rbp; mov rbp,rsp
        let small = [0x49, 0x3b, 0x66, 0x10, 0x76, 0x40, 0x55, 0x48, 0x89, 0xe5];
        assert_eq!(push_after_stack_check(&small), Some(6));
        // lea r12,[rsp-0x100]; cmp r12,[r14+0x10]; jbe +0x40; push rbp
        let big = [
            0x4c, 0x8d, 0xa4, 0x24, 0x00, 0xff, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x76, 0x40,
            0x55,
        ];
        assert_eq!(push_after_stack_check(&big), Some(14));
        // A NOSPLIT function: its push is the entry.
        assert_eq!(push_after_stack_check(&[0x55, 0xc3]), Some(0));
        // mov rax,rbx before the push: the arguments would differ.
        let moved = [0x48, 0x89, 0xd8, 0x55];
        assert_eq!(push_after_stack_check(&moved), None);
        // push rbx is not the frame's push; no push at all.
        assert_eq!(push_after_stack_check(&[0x53, 0xc3]), None);
        assert_eq!(push_after_stack_check(&[0xc3]), None);
    }

    #[test]
    fn garbage_and_truncated_code_decode_without_panic() {
        let mut seed = 7u32;
        for len in 0..300 {
            let code: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (seed >> 16) as u8
                })
                .collect();
            let r = returns(&code);
            assert!(r.iter().all(|&o| (o as usize) < code.len()));
            assert!(push_after_stack_check(&code).is_none_or(|o| (o as usize) < code.len()));
            assert!(read(&code).is_err());
        }
    }
}
