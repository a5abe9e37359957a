"""The numpy engine with the attention features (docs/fixture-format.md, "Attention
features"): soft cap, sinks, ALiBi and chunked local attention, declared in `supports` and
read from the config kvfuzz hands in; and one with a real-world feature bug. With the
quantized KV caches too ("Quantized KV caches"): one that stores K and V through
kvfuzz.quantize_row and reads them back, and one that drops V's fp8 scale. With MLA's value
read from its key (value_from_key): one that caches keys alone and reads each value from its
key's row, and one that reads it from the row's end; over an fp8 key cache, one that reads
the latent back through K's scale and one that forgets it. With RoPE's interleaved pairs
(rope_interleaved): one that turns the pairs config.rope_style names, and one that turns the
half-split ones whatever it says. With MLA's decoupled RoPE part (rope_dims): one that turns
only the key's last config.rope_dims elements, and one that turns its first ones."""

import ml_dtypes
import numpy as np

import kvfuzz
from numpy_engine import NumpyEngine

FEATURES = {"softcap": True, "sinks": True, "alibi": True, "chunked_local": True}


class FeaturesEngine(NumpyEngine):
    supports = FEATURES

    def _forward(self, chunk):
        c, s = self.config, self.sequences[chunk.seq]
        positions = s.position + np.arange(chunk.tokens)
        s.keys = np.concatenate([s.keys, self._store(self._rotate(chunk.k, positions), "k")])
        s.values = np.concatenate([s.values, self._values(chunk)])
        s.position += chunk.tokens
        q = self._rotate(chunk.q, positions)
        keys = np.repeat(s.keys, c.group, axis=1)
        values = np.repeat(s.values, c.group, axis=1)
        logits = np.einsum("thd,nhd->thn", q, keys) * c.scale
        if c.softcap is not None:
            logits = c.softcap * np.tanh(logits / c.softcap)
        query = positions[:, None]  # buffer index == position: truncate keeps positions
        key = np.arange(len(s.keys))[None, :]
        if c.alibi is not None:
            slopes = np.asarray(self._slopes(chunk), dtype=np.float64)
            logits = logits + slopes[None, :, None] * (key - query)[:, None, :]
        visible = key <= query
        if c.window is not None:
            visible &= key > query - c.window
        if c.chunked_local is not None:
            visible &= key >= query // c.chunked_local * c.chunked_local
        logits = np.where(visible[:, None, :], logits, -np.inf)
        top = logits.max(axis=2, keepdims=True)
        sinks = self._sinks(chunk)
        if sinks is not None:
            top = np.maximum(top, np.asarray(sinks)[None, :, None])
        weights = np.exp(logits - top)
        total = weights.sum(axis=2, keepdims=True)
        if sinks is not None:
            total = total + np.exp(np.asarray(sinks)[None, :, None] - top)
        return positions, np.einsum("thn,nhd->thd", weights / total, values)

    def _store(self, rows, which):
        """What the cache reads back of rows [token, kv_head, dim]: the rows themselves."""
        return rows

    def _values(self, chunk):
        """The chunk's value rows [token, kv_head, value_dim] as the cache keeps them."""
        return self._store(chunk.v.astype(np.float64), "v")

    def _slopes(self, chunk):
        return self.config.alibi

    def _sinks(self, chunk):
        return self.config.sinks


class SinkPrefillOnlyEngine(FeaturesEngine):
    """Leaves the sink out of a row decoded alone (a one-token chunk)."""

    def _sinks(self, chunk):
        return None if chunk.tokens == 1 else self.config.sinks  # the bug


DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


class QuantizedEngine(FeaturesEngine):
    """Stores each (token, kv head) row of K (rotated, rounded to the dtype) and V in the
    layout's k_format / v_format through kvfuzz.quantize_row, and attends over what
    kvfuzz.dequantize_row reads back."""

    supports = {**FEATURES, "kv_fp8": True, "kv_ggml_blocks": True, "kv_affine": True}

    def _store(self, rows, which):
        fmt = getattr(self.config, which + "_format")
        if fmt is None:
            return rows
        out = np.empty_like(rows)
        for t in range(rows.shape[0]):
            for g in range(rows.shape[1]):
                row = rows[t, g].astype(DTYPES[self.config.dtype]).astype(np.float32)
                scale = fmt["scales"][g] if fmt["scales"] else 1.0
                # An affine group's scale and bias are stored in the layout's dtype.
                group = fmt.get("group", 64)
                data = kvfuzz.quantize_row(fmt["type"], row, scale, group=group, dtype=self.config.dtype)
                out[t, g] = kvfuzz.dequantize_row(
                    fmt["type"], data, row.size, self._read_scale(scale, which), group=group
                )
        return out

    def _read_scale(self, scale, which):
        return scale


class Fp8VScaleDroppedEngine(QuantizedEngine):
    """Reads its fp8 V rows back without V's scale (K keeps its own)."""

    def _read_scale(self, scale, which):
        return 1.0 if which == "v" else scale  # the bug


class LatentEngine(FeaturesEngine):
    """MLA as its kernels cache it: under value_from_key the chunks' v is never read; each
    value is the first value_dim elements of its key's row."""

    supports = {**FEATURES, "value_from_key": True}

    def _values(self, chunk):
        if not self.config.value_from_key:
            return super()._values(chunk)
        return self._latent(chunk.k.astype(np.float64), self.config.value_dim)

    def _latent(self, keys, value_dim):
        return keys[:, :, :value_dim]


class LatentAtKeyEndEngine(LatentEngine):
    """Reads each value from the last value_dim elements of its key's row."""

    def _latent(self, keys, value_dim):
        return keys[:, :, keys.shape[2] - value_dim:]  # the bug


class LatentFp8Engine(QuantizedEngine):
    """MLA over an fp8 or ggml block key cache, as an MLA kernel reads it (vLLM's
    kv_cache_dtype=fp8, llama.cpp's DeepSeek with -ctk q8_0): each value is the first
    value_dim elements of its key's row read back from the cache, through K's format and
    scale."""

    supports = {**FEATURES, "kv_fp8": True, "kv_ggml_blocks": True, "value_from_key": True}

    def _values(self, chunk):
        if not self.config.value_from_key:
            return super()._values(chunk)
        keys = self._store(chunk.k.astype(np.float64), "k")  # no RoPE: rope_dims undeclared
        return keys[:, :, : self.config.value_dim]


class LatentFp8UnscaledEngine(LatentFp8Engine):
    """Reads the latent as the value without K's scale (its score pass keeps it)."""

    def _values(self, chunk):
        values = super()._values(chunk)
        fmt = self.config.k_format
        if not self.config.value_from_key or fmt is None or not fmt["scales"]:
            return values
        return values / np.asarray(fmt["scales"], dtype=np.float64)[None, :, None]  # the bug


class RopePairsEngine(FeaturesEngine):
    """Turns RoPE's pairs as config.rope_style says: (x[2i], x[2i+1]) when "interleaved"."""

    supports = {**FEATURES, "rope_interleaved": True}

    def _rotate(self, x, positions):
        if self.config.rope_theta is None or not self._interleaved():
            return super()._rotate(x, positions)
        x = x.astype(np.float64)
        theta, dim = self.config.rope_theta, self.config.head_dim
        angles = positions[:, None] * theta ** (-2.0 * np.arange(dim // 2) / dim)  # [t, pair]
        cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def _interleaved(self):
        return self.config.rope_style == "interleaved"


class RopeHalfSplitOnlyEngine(RopePairsEngine):
    """Declares interleaved pairs and turns the half-split ones whatever config says."""

    def _interleaved(self):
        return False  # the bug


class MlaRopePartEngine(LatentEngine):
    """MLA with RoPE on the key's last config.rope_dims elements (DeepSeek's [latent; RoPE
    part] row): NeoX half-split pairs within the part, angles theta^(-2i/rope_dims)."""

    supports = {**FEATURES, "value_from_key": True, "rope_dims": True}

    def _rotate(self, x, positions):
        dims = self.config.rope_dims
        if self.config.rope_theta is None or dims is None:
            return super()._rotate(x, positions)
        x = x.astype(np.float64)
        start, end = self._part(x.shape[-1], dims)
        half = dims // 2
        angles = positions[:, None] * self.config.rope_theta ** (-2.0 * np.arange(half) / dims)
        cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
        a, b = x[..., start : start + half], x[..., start + half : end]
        out = x.copy()
        out[..., start : start + half] = a * cos - b * sin
        out[..., start + half : end] = a * sin + b * cos
        return out

    def _part(self, head_dim, dims):
        return head_dim - dims, head_dim


class MlaRopeAtFrontEngine(MlaRopePartEngine):
    """Turns the key's first rope_dims elements (NeoX's partial rotary) on an MLA row."""

    def _part(self, head_dim, dims):
        return 0, dims  # the bug
