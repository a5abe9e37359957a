# Type stubs of the extension module (python/src/module.cpp); the package's own modules
# carry their hints inline. Use the kvfuzz package, not this module.
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy

__version__: str

class FixtureError(ValueError): ...
class EngineError(RuntimeError): ...

class EngineConfig:
    q_heads: int
    kv_heads: int
    group: int
    head_dim: int
    value_dim: int
    page_size: int
    dtype: str
    scale: float
    rope_theta: Optional[float]
    rope_style: str
    rope_dims: Optional[int]
    window: Optional[int]
    softcap: Optional[float]
    sinks: Optional[List[float]]
    alibi: Optional[List[float]]
    chunked_local: Optional[int]
    k_format: Optional[Dict[str, Any]]
    v_format: Optional[Dict[str, Any]]
    value_from_key: bool
    sequences: int
    page_order: List[int]
    poison: str

class Chunk:
    seq: int
    tokens: int
    q: numpy.ndarray
    k: numpy.ndarray
    v: numpy.ndarray

class ModelConfig:
    vocab: int
    width: int
    layers: int
    ffn: int
    seed: int

class ModelEngineConfig:
    engine: EngineConfig
    model: ModelConfig
    def weights(self) -> Dict[str, Any]: ...

class ModelChunk:
    seq: int
    tokens: int
    ids: numpy.ndarray

class Scenario:
    name: str
    note: str
    sequences: int
    ops: int
    tokens: int
    q_heads: int
    kv_heads: int
    head_dim: int
    value_dim: int
    dtype: str
    is_model: bool
    hash: str
    seed: Optional[int]
    recorded_property: str
    @staticmethod
    def from_json(text: str, origin: str = "<string>") -> Scenario: ...
    @staticmethod
    def load(path: str) -> Scenario: ...
    def save(self, path: str) -> None: ...
    def to_json(self) -> str: ...
    def copy(self) -> Scenario: ...

class Engine:
    name: str
    mutant: bool
    def declarations(self, fork: bool = True) -> dict: ...
    def unjudgeable(self, scenario: Scenario) -> Optional[str]: ...

class Outcome:
    passed: bool
    signature: Optional[str]
    kind: Optional[str]
    failure: str
    report: str

class Shrunk:
    scenario: Scenario
    outcome: Outcome
    accepted: int
    tried: int
    skipped_seen: int
    timed_out: bool
    out_of_candidates: bool
    canonicalised: bool
    kept_input: bool

class CheckFinding:
    case_number: int
    seed: int
    signature: str
    property: Optional[str]
    line: str
    report: str
    fixture: str
    duplicates: int
    ignored: bool

class CheckRun:
    cases: int
    skipped: int
    skipped_why: str
    rows: int
    unjudged: int
    bound_used: float
    crashes: int
    failing: Dict[str, int]
    findings: List[CheckFinding]
    interrupted: bool

class KnownBug:
    """A bug already filed: one fixture of the known list (kvfuzz/root_causes.h)."""

    fixture: str
    cause: str
    still_failing: bool
    seen: int
    def state_line(self) -> str: ...

class RootCauses:
    """Known bugs and the root causes of a run's shrunk findings, settled as kvfuzz check
    --known settles them."""

    def __init__(self, known: List[str]) -> None: ...
    @property
    def known(self) -> List[KnownBug]: ...
    def mark_still_failing(self, index: int) -> None: ...
    def still_failing(self) -> int: ...
    def room(self, properties: int) -> int: ...
    def settle(self, engine: str, shrunk_fixture: str, id: int, count: int) -> Tuple[str, int]: ...

def run_check(
    engine: Engine,
    case_seeds: List[int],
    properties: List[str],
    out: str,
    *,
    jobs: int = 1,
    fork: bool = True,
    timeout: float = 600.0,
    max_failures: int = 1,
    ignore: List[str] = [],
    max_tokens: int = 0,
    max_head_dim: int = 0,
    max_q_heads: int = 0,
    on_finding: Optional[Callable[[CheckFinding], None]] = None,
    on_progress: Optional[Callable[[int, int, int], None]] = None,
) -> CheckRun: ...
class CrashShrunk:
    scenario: Scenario
    accepted: int
    tried: int
    timed_out: bool

def shrink_crash(
    scenario: Scenario,
    engine: Engine,
    signature: str,
    properties: List[str],
    seconds: float,
    timeout: float,
    failure: str,
) -> Optional[CrashShrunk]: ...
def python_engine(factory: Callable[[EngineConfig], Any], name: str) -> Engine: ...
def builtin_engine(name: str) -> Engine: ...
def builtin_engines() -> List[str]: ...
def properties() -> List[Tuple[str, str]]: ...
def case_seed(run_seed: int, index: int) -> int: ...
def quantize_row(
    format: str, values: numpy.ndarray, scale: float = 1.0, group: int = 64, dtype: str = "f32"
) -> bytes: ...
def quantize_group(format: str, keys: numpy.ndarray) -> numpy.ndarray: ...
def dequantize_row(
    format: str, data: bytes, n: int, scale: float = 1.0, group: int = 64
) -> numpy.ndarray: ...
def generate(
    seed: int,
    engine: Optional[Engine] = None,
    max_tokens: int = 0,
    max_head_dim: int = 0,
    max_q_heads: int = 0,
    max_sequences: int = 0,
    max_ops: int = 0,
) -> Scenario: ...
def reference(scenario: Scenario) -> List[tuple]: ...
def judge_expect(scenario: Scenario) -> Optional[str]: ...
def judge(property: str, scenario: Scenario, engine: Engine) -> Outcome: ...
def replay_fixture(scenario: Scenario, engine: Engine, fork: bool = True, timeout: float = 600.0) -> Tuple[str, str]: ...
def explain(scenario: Scenario, engine: Engine, property: Optional[str] = None) -> str: ...
def shrink(
    scenario: Scenario,
    engine: Engine,
    property: str,
    seconds: float,
    fork: bool = True,
    timeout: float = 600.0,
    max_candidates: int = 0,
) -> Optional[Shrunk]: ...
def stamp_failure(scenario: Scenario, source: str, engine: str, property: str, failure: str) -> None: ...
def check_fixture_stem(engine: str, seed: int) -> str: ...
def failure_fixture_stem(engine: str, property: str, kind: str, scenario: Scenario) -> str: ...
def fixtures_below(dir: str) -> List[str]: ...
