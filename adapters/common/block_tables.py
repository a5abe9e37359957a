"""Block tables over a paged KV pool, kept by an adapter as a serving engine's scheduler
keeps them (vLLM's KVCacheManager, OpenVINO GenAI's scheduler): the kernel is handed the
tables and writes or reads the pool; reset, truncate and fork are bookkeeping here.

Per sequence: its blocks in order and its length in tokens. Blocks are handed out in the
scenario's page_order; a fork shares the source's full blocks (reference counts) and copies
its partial last block, and a truncate that leaves a shared partial block copies it first
(copy on write), because the kernels only write slots at or past a sequence's length, so a
full shared block is never written. Every slot that holds no token holds kvfuzz's poison:
the pool's storage is poisoned when made and a freed block or dropped slots are poisoned
again, so a kernel that reads them is seen.

The storage is the adapter's, behind three calls (numpy, ov.Tensor and torch pools alike):
    store.grow(blocks)            the pool holds `blocks` blocks now, the new ones poisoned
    store.poison(block, slot)     slots `slot` and on of `block` hold the poison again
    store.copy(src, dst, slots)   the first `slots` slots of dst are src's
"""

from kv_adapter import check_fork


class BlockTables:
    def __init__(self, sequences, block_size, order, store, reserved=()):
        """order: the pool's block ids in the order they are handed out (kvfuzz's page_order;
        ids past it follow in order as the pool grows). reserved: ids never handed out (vLLM's
        null block, which pads block tables)."""
        self.block_size, self.store = block_size, store
        self.reserved = set(reserved)
        self.order = list(order)
        self.span = max(self.order, default=-1) + 1  # the ids below it are handed out in order
        self.refs, self.free = [], []
        self.tables = [[] for _ in range(sequences)]
        self.lengths = [0] * sequences
        self._grow(max(4, len(order), max(self.reserved, default=-1) + 1))

    def _grow(self, blocks):
        old = len(self.refs)
        self.store.grow(blocks)
        self.refs += [0] * (blocks - old)
        fresh = [b for b in self.order if old <= b < blocks]
        fresh += list(range(max(old, self.span), blocks))
        self.free += [b for b in fresh if b not in self.reserved]

    def _take(self):
        if not self.free:
            self._grow(2 * len(self.refs))
        block = self.free.pop(0)
        self.refs[block] = 1
        return block

    def _release(self, block):
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self.store.poison(block, 0)
            self.free.append(block)

    def _private_copy(self, block, slots):
        fresh = self._take()
        self.store.copy(block, fresh, slots)
        return fresh

    def check(self, seq):
        if not 0 <= seq < len(self.tables):
            raise IndexError(f"sequence {seq} out of range (the engine has {len(self.tables)})")

    def reserve(self, seq, new_tokens):
        """The table of `seq` covers its length plus new_tokens: blocks taken as needed.
        Returns the pool slot of each new token (block * block_size + offset), in order."""
        table, n = self.tables[seq], self.lengths[seq]
        while len(table) * self.block_size < n + new_tokens:
            table.append(self._take())
        bs = self.block_size
        return [table[p // bs] * bs + p % bs for p in range(n, n + new_tokens)]

    def advance(self, seq, new_tokens):
        self.lengths[seq] += new_tokens

    def reset(self, seq):
        self.check(seq)
        for block in self.tables[seq]:
            self._release(block)
        self.tables[seq], self.lengths[seq] = [], 0

    def truncate(self, seq, keep):
        self.check(seq)
        if not 0 <= keep <= self.lengths[seq]:
            raise ValueError(f"sequence {seq} holds {self.lengths[seq]} tokens, cannot keep {keep}")
        table, bs = self.tables[seq], self.block_size
        need = -(-keep // bs)
        for block in table[need:]:
            self._release(block)
        del table[need:]
        if keep % bs:
            last = table[-1]
            if self.refs[last] > 1:  # shared with a fork: copy on write
                table[-1] = self._private_copy(last, keep % bs)
                self._release(last)
            else:
                self.store.poison(last, keep % bs)
        self.lengths[seq] = keep

    def fork(self, src, dst):
        check_fork(self.check, src, dst)
        self.reset(dst)
        length, table, bs = self.lengths[src], self.tables[src], self.block_size
        full = length // bs
        for block in table[:full]:
            self.refs[block] += 1
        shared = list(table[:full])
        if length % bs:
            shared.append(self._private_copy(table[full], length % bs))
        self.tables[dst], self.lengths[dst] = shared, length
