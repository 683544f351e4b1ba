# The output error that e4m3 weights made from a multiply-add's bits
# (bytes.patch: the byte round(8 t + 56), t the weight's log2 times 2^8,
# i.e. 2^floor(t) (1 + f) with f the fraction of t to 3 bits) would add
# to attention, against the launch's weights (2^t rounded to e4m3), both
# against float64 softmax attention; e4m3 V, 128 rows x 4096 keys x 128,
# scores (log2 domain) normal with the given spread. CPU only.
#   python bytes_numerics.py
import torch


def e4m3(x):
    return x.to(torch.float8_e4m3fn).to(torch.float64)


def byte_weights(t):
    """The e4m3 values of the bytes round(8 t + 56), clamped at 0."""
    y = torch.round(8 * t + 56).clamp(min=0).to(torch.int64)
    return (y & 0xFF).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)


def main():
    torch.manual_seed(0)
    for spread in (1.0, 3.0, 8.0):
        worst = {"launch": 0.0, "bytes": 0.0}
        ratio = [1.0, 1.0]
        for _ in range(4):
            s = torch.randn(128, 4096, dtype=torch.float64) * spread
            v = e4m3(torch.randn(4096, 128))
            ref = torch.softmax(s * torch.log(torch.tensor(2.0)), 1) @ v
            t = s - s.max(1, keepdim=True).values + 8
            exact = torch.exp2(t)
            # The launch sums the weights before rounding them.
            launch = (e4m3(exact) @ v) / exact.sum(1, keepdim=True)
            b = byte_weights(t)
            out_b = (b @ v) / b.sum(1, keepdim=True)
            for name, out in (("launch", launch), ("bytes", out_b)):
                err = ((out - ref).abs().max() / ref.abs().max()).item()
                worst[name] = max(worst[name], err)
            kept = b > 0
            r = b[kept] / exact[kept]
            ratio = [min(ratio[0], r.min().item()), max(ratio[1], r.max().item())]
        print(
            f"spread {spread:3.0f}: largest error / largest output: launch "
            f"{worst['launch']:.4f}, bytes {worst['bytes']:.4f}; byte weight / "
            f"2^t in {ratio[0]:.3f} .. {ratio[1]:.3f}"
        )


if __name__ == "__main__":
    main()
