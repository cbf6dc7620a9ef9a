#!/usr/bin/env bash
# End-to-end: `vkformer devices` lists the CPU device with every capability field, exits 0, and
# bad device requests fail with a clear message and exit code 1.
set -u
bin="$1"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$bin" devices) || fail "devices exited $?"
for field in "type:" "driver:" "Vulkan API:" "memory heaps:" "subgroup size:" \
             "max shared memory per workgroup:" "maxStorageBufferRange:" "fp16 arithmetic:" \
             "bf16" "16-bit storage:" "cooperative matrix NV:" "cooperative matrix KHR:" \
             "buffer device address:" "(selected)"; do
  grep -qF -- "$field" <<<"$out" || fail "devices output lacks '$field'"
done

err=$("$bin" --device 97 devices 2>&1); rc=$?
[ $rc -eq 1 ] || fail "--device 97 exited $rc, expected 1"
grep -q "device 97 requested" <<<"$err" || fail "unclear message for --device 97: $err"

err=$(VKF_DEVICE=gpu0 "$bin" devices 2>&1); rc=$?
[ $rc -eq 1 ] || fail "VKF_DEVICE=gpu0 exited $rc, expected 1"
grep -q "VKF_DEVICE='gpu0' is not a device index" <<<"$err" || fail "unclear message: $err"

# No Vulkan driver at all: a clear message, exit 0.
out=$(VK_DRIVER_FILES=/nonexistent.json VK_ICD_FILENAMES=/nonexistent.json "$bin" devices 2>&1); rc=$?
[ $rc -eq 0 ] || fail "devices without a driver exited $rc: $out"
grep -q "No Vulkan device found" <<<"$out" || fail "no-driver message missing: $out"

echo "1 passed, 0 failed"
