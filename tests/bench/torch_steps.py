"""Timing of PyTorch training steps for the benchmarks' PyTorch sides
(conv_torch.py, mlp_torch.py): each step is zero_grad, forward, loss,
backward and the optimizer's step, timed alone."""
import time


def median_step_ms(model, opt, loss_fn, x, y, steps, warmup):
    """Runs warmup + steps training steps of model on (x, y); returns the
    loss of the first step and the median ms of the last `steps`."""
    times, first = [], None
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if first is None:
            first = loss.item()
        if s >= warmup:
            times.append(dt)
    times.sort()
    return first, 1e3 * times[len(times) // 2]
