//! Cache-line write-back instructions, chosen once at start-up from CPUID.
#![allow(unsafe_code)]

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Instruction {
    Clwb,
    ClflushOpt,
    Clflush,
    /// Not x86-64: `persist` relies on the file backend's own syncing.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    Unsupported,
}

pub(crate) struct Flusher {
    instruction: Instruction,
}

impl Flusher {
    pub(crate) fn detect() -> Self {
        Flusher {
            instruction: detect_instruction(),
        }
    }

    #[allow(dead_code)]
    pub(crate) fn instruction(&self) -> Instruction {
        self.instruction
    }

    #[inline]
    pub(crate) fn write_back(&self, line: *const u8) {
        #[cfg(target_arch = "x86_64")]
        match self.instruction {
            // SAFETY: `line` points into a live mapping (the caller derives it
            // from a bounds-checked offset); these instructions only write the
            // line back to memory and never change its contents.
            Instruction::Clwb => unsafe {
                std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
            },
            // SAFETY: as above.
            Instruction::ClflushOpt => unsafe {
                std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
            },
            // SAFETY: as above; clflush is available on every x86-64 CPU.
            Instruction::Clflush => unsafe { std::arch::x86_64::_mm_clflush(line) },
            Instruction::Unsupported => {}
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }

    #[inline]
    pub(crate) fn fence(&self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: sfence has no memory operands and is available on x86-64.
        unsafe {
            std::arch::x86_64::_mm_sfence()
        }
        #[cfg(not(target_arch = "x86_64"))]
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(target_arch = "x86_64")]
fn detect_instruction() -> Instruction {
    // CPUID leaf 7, sub-leaf 0: EBX bit 24 = CLWB, bit 23 = CLFLUSHOPT.
    let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
    if leaf7.ebx & (1 << 24) != 0 {
        Instruction::Clwb
    } else if leaf7.ebx & (1 << 23) != 0 {
        Instruction::ClflushOpt
    } else {
        Instruction::Clflush
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_instruction() -> Instruction {
    Instruction::Unsupported
}
