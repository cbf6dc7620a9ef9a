# torch.optim.AdamW / SGD (foreach=False), fp32 on the CPU, 3 steps: fixtures for test_optim.
# Writes OUT/adamw_torch.bin and OUT/sgd_torch.bin, raw little-endian float32, N=67 per array;
# per config (the order of A and S below): p0, then per step g, p, then exp_avg, exp_avg_sq
# (AdamW) or the momentum buffer (SGD; zeros without momentum).
# Usage: python3 tools/oracle/optim_fixture.py tests/fixtures/optim
import sys, torch
o = sys.argv[1]; N = 67
A = [(1e-3, .9, .999, 1e-8, 0.), (1e-3, .9, .999, 1e-8, .01), (1e-3, .9, .999, 1e-3, .01),
     (1e-3, .9, .999, 1e-3, 0.), (3e-2, .3, .95, 1e-6, .1)]
S = [(.1, 0., 0., 0., False), (.1, 0., 0., .01, False), (.05, .9, 0., 0., False),
     (.05, .9, .1, .01, False), (.05, .9, 0., .01, True)]
def G(g):
    x = torch.randn(N, generator=g) * .1; i = torch.arange(N)
    x[i % 7 == 3] = 0.; x[i % 11 == 5] *= 1e-7; return x
def run(cfgs, make, state, seed, name):
    C = []
    for k, c in enumerate(cfgs):
        g = torch.Generator().manual_seed(seed + k)
        p0 = torch.rand(N, generator=g) * 2 - 1; p = torch.nn.Parameter(p0.clone())
        opt = make(p, c); C.append(p0)
        for t in range(3):
            x = G(g); p.grad = x.clone(); opt.step()
            C += [x, p.detach().clone()] + state(opt.state[p])
    torch.cat(C).numpy().astype('<f4').tofile(f"{o}/{name}")
run(A, lambda p, c: torch.optim.AdamW([p], lr=c[0], betas=c[1:3], eps=c[3], weight_decay=c[4],
                                      foreach=False),
    lambda s: [s["exp_avg"].clone(), s["exp_avg_sq"].clone()], 100, "adamw_torch.bin")
run(S, lambda p, c: torch.optim.SGD([p], lr=c[0], momentum=c[1], dampening=c[2],
                                    weight_decay=c[3], nesterov=c[4], foreach=False),
    lambda s: [s["momentum_buffer"].clone() if s.get("momentum_buffer") is not None
               else torch.zeros(N)], 200, "sgd_torch.bin")
print("torch", torch.__version__, torch.backends.cpu.get_cpu_capability())
