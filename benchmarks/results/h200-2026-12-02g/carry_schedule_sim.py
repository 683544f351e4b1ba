# The carry loader's staging schedule in plain Python (seventeenth session):
# each stream tile staged once, into slot index % NUM_RAW, before it is
# consumed, and a slot restaged only after its tile was consumed. CPU only.
import random


def check_program(items, mine, nprog, num_raw, block_q):
    staged = {}  # stream index -> (item, tile)
    busy = {}  # slot -> stream index staged and not consumed yet

    def stage(idx, item, tile):
        slot = idx % num_raw
        assert slot not in busy, (idx, slot, busy)
        assert idx not in staged
        staged[idx] = (item, tile)
        busy[slot] = idx

    r = ahead = 0
    for it in mine:
        num_q, n_tiles = items[it]
        nxt = it + nprog
        n_next = items[nxt][1] if nxt < len(items) and items[nxt][0] > 0 else 0
        for p in range(0, num_q, block_q):
            p_item, p_tiles = (it, n_tiles) if p + block_q < num_q else (nxt, n_next)
            if n_tiles < num_raw:
                p_tiles = 0
            for i in range(ahead, min(num_raw, n_tiles)):
                stage(r + i, it, i)
            ahead = 0
            for t in range(n_tiles):
                idx = r + t
                assert staged.get(idx) == (it, t), (idx, staged.get(idx), (it, t))
                assert busy.pop(idx % num_raw) == idx
                u = t + num_raw
                if u < n_tiles:
                    stage(r + u, it, u)
                if n_tiles <= u < n_tiles + p_tiles:
                    stage(r + u, p_item, u - n_tiles)
                    ahead = u - n_tiles + 1
            r += n_tiles
    assert not busy, busy


rng = random.Random(0)
for _ in range(300):
    queries = [0, 1, 5, 8, 16, 17, 20, 33]
    tiles = [0, 1, 2, 3, 4, 5, 17]
    items = [
        (rng.choice(queries), rng.choice(tiles)) for _ in range(rng.randint(1, 60))
    ]
    nprog = rng.randint(1, 7)
    for prog in range(nprog):
        mine = list(range(prog, len(items), nprog))
        check_program(
            items, mine, nprog, rng.choice([1, 2, 3, 4, 6]), rng.choice([8, 16])
        )
print("ok")
