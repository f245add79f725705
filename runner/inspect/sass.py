"""Read SASS (nvdisasm or `cuobjdump -sass` text): instructions per function, an instruction mix
that explains speed, the main loop, and an estimate of FFMA register-bank conflicts.

Pure text processing: no GPU, no CUDA install. The counts are static (each instruction of the
binary once, loops not weighted by their trip counts); the main loop's own mix is given beside
the whole kernel's because that is where the time goes.
"""

import bisect
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

# `/*0a30*/   @!P0 LDS.128 R4, [R2+0x10] ;` (cuobjdump adds the encoding after the `;`)
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;")
_PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")
_NVDISASM_FUNCTION = re.compile(r"^\s*\.text\.([\w$.]+):")
_CUOBJDUMP_FUNCTION = re.compile(r"^\s*Function\s*:\s*([\w$.]+)")
_LABEL = re.compile(r"^\s*(\.L_[\w]+):")
_BRANCH_LABEL = re.compile(r"`\(\s*(\.L_[\w]+)\s*\)")
_BRANCH_ADDRESS = re.compile(r"\b(0x[0-9a-fA-F]+)\b")
_REGISTER = re.compile(r"^[-|!]*R(\d+)(\.reuse)?\|?(?:\.[A-Z0-9_]+)*$")

BRANCHES = {"BRA", "BRX", "JMP", "JMX"}
FP32_OTHER = {"FADD", "FADD32I", "FMUL", "FMUL32I", "FMNMX", "FSETP", "FSET", "FSEL", "FCHK",
              "MUFU", "FRND", "F2F", "FSWZADD"}
CONTROL = BRANCHES | {"BSSY", "BSYNC", "EXIT", "RET", "CALL", "WARPSYNC", "BMOV", "BREAK",
                      "YIELD", "KILL"}
# Tensor-core matrix products: mma.sync (HMMA for FP16/BF16/TF32, IMMA, DMMA) and Hopper's
# warpgroup wgmma (HGMMA); the work of a tensor-core step, as FFMA is a SIMT step's.
TENSOR = {"HMMA", "IMMA", "DMMA", "HGMMA", "IGMMA", "QGMMA", "BGMMA"}
# Hopper's tensor memory accelerator: tiled copies through a tensor map (cp.async.bulk.tensor:
# UTMALDG loads, UTMASTG stores, UTMAPF prefetches, UTMAREDG reductions) and plain bulk copies
# (cp.async.bulk: UBLKCP, UBLKRED, UBLKPF). One instruction moves a whole tile.
TMA = {"UTMALDG", "UTMASTG", "UTMAPF", "UTMAREDG", "UBLKCP", "UBLKRED", "UBLKPF"}
# What orders asynchronous work: mbarrier operations (SYNCS: arrive, expect-tx, try-wait on a
# phase) and wgmma's fence and wait (WARPGROUP.ARRIVE, WARPGROUP.DEPBAR).
ASYNC_ORDER = {"SYNCS", "WARPGROUP"}


@dataclass(frozen=True)
class Instruction:
    address: int
    predicate: str
    opcode: str  # with its modifiers: LDS.128, LDG.E.128.CONSTANT
    operands: str
    target: Optional[int] = None  # a branch's target address, when known

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def width(self) -> int:
        """Access width in bits for loads and stores (32 unless .64 / .128)."""
        parts = self.opcode.split(".")
        return 128 if "128" in parts else 64 if "64" in parts else 32


def parse_sass(text: str) -> dict[str, list[Instruction]]:
    """Instructions per function, in address order; NOPs (alignment padding) left out."""
    functions: dict[str, list[Instruction]] = {}
    current: Optional[list] = None
    labels: dict[str, int] = {}
    pending_labels: list[str] = []
    branches: list[tuple[list, int, str]] = []  # (function, index, label)
    for line in text.splitlines():
        match = _NVDISASM_FUNCTION.match(line) or _CUOBJDUMP_FUNCTION.match(line)
        if match:
            current = functions.setdefault(match.group(1), [])
            continue
        if (label := _LABEL.match(line)) is not None:
            pending_labels.append(label.group(1))
            continue
        match = _INSTRUCTION.match(line)
        if match is None or current is None:
            continue
        address = int(match.group(1), 16)
        for name in pending_labels:
            labels[name] = address
        pending_labels.clear()
        body = match.group(2)
        predicate = ""
        if (pred := _PREDICATE.match(body)) is not None:
            predicate, body = pred.group(0).strip(), body[pred.end():]
        opcode, _, operands = body.partition(" ")
        if opcode == "NOP":
            continue
        target = None
        if opcode.split(".")[0] in BRANCHES:
            if (named := _BRANCH_LABEL.search(operands)) is not None:
                branches.append((current, len(current), named.group(1)))
            elif (hexed := _BRANCH_ADDRESS.search(operands)) is not None:
                target = int(hexed.group(1), 16)
        current.append(Instruction(address, predicate, opcode, operands.strip(), target))
    for function, index, label in branches:
        if label in labels:
            old = function[index]
            function[index] = Instruction(old.address, old.predicate, old.opcode, old.operands,
                                          labels[label])
    return functions


def main_loop(instructions: list[Instruction]) -> Optional[list[Instruction]]:
    """The body of the loop that holds the most FFMAs and tensor-core products (a step's
    arithmetic), the shortest of those (a kernel that runs its steady iterations through an
    unguarded copy of the body and its last ones through a guarded copy has two such loops,
    and the unguarded one is hot); without either, the loop with the most shared and global
    memory instructions. The instructions from a backward branch's target to the branch; None
    when the function has no backward branch."""
    best, best_key = None, None
    addresses = [i.address for i in instructions]  # ascending
    for index, branch in enumerate(instructions):
        if branch.target is None or branch.target >= branch.address:
            continue  # forward, or the `BRA` to itself that pads a function's end
        body = instructions[bisect.bisect_left(addresses, branch.target):index + 1]
        counts = Counter(i.base for i in body)
        work = counts["FFMA"] + counts["FFMA32I"] + sum(counts[base] for base in TENSOR)
        memory = counts["LDS"] + counts["LDG"] + counts["LDGSTS"] + counts["STS"]
        key = (work, -len(body), memory) if work else (0, memory, -len(body))
        if best_key is None or key > best_key:
            best, best_key = body, key
    return best


# The register-bank rule used for the conflict estimate, and its limits, as the summary states it.
BANK_RULE = (
    "FFMA register-bank conflicts are an estimate under the rule published for Volta and Turing "
    "by microbenchmarks (Jia et al., 'Dissecting the NVIDIA Volta GPU Architecture via "
    "Microbenchmarking', 2018, and the Turing T4 report, 2019): two 64-bit-wide banks, a "
    "register's bank is `reg % 2`, and an FFMA stalls only when its three source registers, all "
    "different and all read from the register file, sit in one bank. (Maxwell/Pascal, as maxas "
    "documents, had four banks, `reg % 4`, with a conflict for any two sources in one bank; that "
    "rule does not hold after Volta.) A source is taken as served by the operand reuse cache, "
    "not the banks, when the previous instruction read the same register in the same operand "
    "slot with `.reuse`. Limits: NVIDIA does not document the bank layout; no public "
    "measurement confirms the Volta rule on Hopper (sm_90); the count is static (each "
    "instruction once, loops not weighted); RZ, constants, immediates and uniform registers "
    "never conflict.")


def _source_registers(operands: str) -> list[tuple[Optional[int], bool]]:
    """(register number or None, reuse flag) per source operand, in slot order."""
    parts = [part.strip() for part in operands.split(",")]
    sources = []
    for part in parts[1:]:  # the first operand is the destination
        match = _REGISTER.match(part.replace(" ", ""))
        sources.append((int(match.group(1)), bool(match.group(2))) if match else (None, False))
    return sources


def ffma_bank_conflicts(instructions: list[Instruction]) -> int:
    """FFMAs whose three register-file reads fall in one bank (the rule in BANK_RULE)."""
    conflicts = 0
    cached: dict[int, int] = {}  # operand slot -> register kept by the previous .reuse
    for instruction in instructions:
        sources = _source_registers(instruction.operands)
        if instruction.base == "FFMA" and len(sources) == 3:
            reads = {reg for slot, (reg, _) in enumerate(sources)
                     if reg is not None and cached.get(slot) != reg}
            if len(reads) == 3 and len({reg % 2 for reg in reads}) == 1:
                conflicts += 1
        cached = {slot: reg for slot, (reg, reuse) in enumerate(sources)
                  if reg is not None and reuse}
    return conflicts


def ffma_moved_accumulators(instructions: list[Instruction]) -> int:
    """FFMAs whose destination is not their addend's register: the accumulator moves to another
    register. ptxas does this where register pressure or a basic-block boundary makes it
    shuffle; in matmul_9 (H100, ncu) such FFMAs stalled at dispatch 2-5x as often as those that
    accumulate in place. A count, not a ranking: fewer moves is not always faster."""
    moved = 0
    for instruction in instructions:
        if instruction.base != "FFMA":
            continue
        parts = [part.strip() for part in instruction.operands.split(",")]
        destination = _REGISTER.match(parts[0].replace(" ", "")) if parts else None
        sources = _source_registers(instruction.operands)
        if destination and len(sources) == 3 and sources[2][0] is not None \
                and int(destination.group(1)) != sources[2][0]:
            moved += 1
    return moved


@dataclass
class InstructionMix:
    total: int = 0  # every instruction but NOP
    by_opcode: Counter = field(default_factory=Counter)  # base opcode -> count
    widths: dict = field(default_factory=dict)  # "LDS" -> Counter({32: n, 64: n, 128: n})
    bank_conflicts: int = 0
    moved_accumulators: int = 0

    @classmethod
    def of(cls, instructions: list[Instruction]) -> "InstructionMix":
        mix = cls(total=len(instructions))
        for instruction in instructions:
            mix.by_opcode[instruction.base] += 1
            if instruction.base in ("LDS", "STS", "LDG", "STG", "LDGSTS", "LDL", "STL"):
                mix.widths.setdefault(instruction.base, Counter())[instruction.width] += 1
        mix.bank_conflicts = ffma_bank_conflicts(instructions)
        mix.moved_accumulators = ffma_moved_accumulators(instructions)
        return mix

    def count(self, *bases: str) -> int:
        return sum(self.by_opcode[base] for base in bases)

    def width_count(self, base: str, width: int) -> int:
        return self.widths.get(base, Counter())[width]

    @property
    def ffma(self) -> int:
        return self.count("FFMA", "FFMA32I")

    @property
    def ffma_share(self) -> Optional[float]:
        return self.ffma / self.total if self.total else None

    @property
    def tensor(self) -> int:
        """Tensor-core matrix products (HMMA, HGMMA, ...)."""
        return self.count(*TENSOR)

    @property
    def fp32_other(self) -> int:
        return self.count(*FP32_OTHER)

    @property
    def control(self) -> int:
        return self.count(*CONTROL)

    @property
    def barriers(self) -> int:
        return self.count("BAR")

    @property
    def tma(self) -> int:
        """Tile copies by the tensor memory accelerator (UTMALDG, UTMASTG, UBLKCP, ...)."""
        return self.count(*TMA)

    @property
    def async_order(self) -> int:
        """mbarrier operations (SYNCS) and wgmma's fences and waits (WARPGROUP)."""
        return self.count(*ASYNC_ORDER)

    @property
    def memory(self) -> int:
        return self.count("LDS", "STS", "LDG", "STG", "LDGSTS", "LDL", "STL", "LDSM", "LDC",
                          "LDGDEPBAR", "DEPBAR", "ATOMS", "ATOMG", "RED", *TMA)

    @property
    def integer_and_other(self) -> int:
        return self.total - self.ffma - self.tensor - self.fp32_other - self.control \
            - self.barriers - self.memory - self.async_order
