#!/usr/bin/env python3
"""Checks that vkformer and huggingface_hub share one cache, both ways, against the local test Hub
(tests/common/hub_server.py) so that no network is needed. Run where huggingface_hub is installed
(the H200 machine), with a built vkformer:

    python3 tools/oracle/hub_cache_interop.py build/vkformer

1. huggingface_hub.snapshot_download (online, from the test Hub) fills a fresh cache; vkformer then
   uses it with HF_HUB_OFFLINE=1 and the server stopped (`pull` prints the same snapshot folder,
   `tokenize` and `generate --model org/name` run).
2. `vkformer pull` fills another fresh cache; huggingface_hub then reads it offline
   (snapshot_download and hf_hub_download with local_files_only=True, and HF_HUB_OFFLINE=1) and gets
   the same folder and bytes; try_to_load_from_cache finds every file.
3. Both layouts are compared entry by entry (refs, blob names, symlink targets).
Exits non-zero on the first difference.
"""
import filecmp
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def layout(cache):
    out = {}
    for root, dirs, files in os.walk(cache):
        for n in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, cache)
            if rel.startswith(".locks") or n.endswith(".lock"):
                continue
            # huggingface_hub >= 1.x also writes a CACHEDIR.TAG marker and trees/<commit>.json (its
            # cache of the file listing, rebuilt when absent); vkformer writes neither, and step 2
            # shows huggingface_hub reading a cache without them.
            if rel == "CACHEDIR.TAG" or "/trees/" in rel:
                continue
            out[rel] = ("link", os.readlink(p)) if os.path.islink(p) else ("file", open(p, "rb").read())
    return out


def main():
    vkformer = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp()
    model = os.path.join(work, "root/models/acme/tiny/main")
    os.makedirs(model)
    for f in ("config.json", "model.safetensors"):
        subprocess.check_call(["cp", os.path.join(REPO, "tests/fixtures/parity/llama", f), model])
    subprocess.check_call([sys.executable, os.path.join(REPO, "tests/common/word_tokenizer.py"), model])
    ports = os.path.join(work, "ports")
    server = subprocess.Popen([sys.executable, os.path.join(REPO, "tests/common/hub_server.py"), os.path.join(work, "root"),
                               "--port-file", ports, "--max-seconds", "300"])
    while not os.path.exists(ports):
        time.sleep(0.05)
    endpoint = "http://127.0.0.1:%s" % open(ports).read().split()[0]
    env = dict(os.environ, HF_ENDPOINT=endpoint)
    env.pop("HF_TOKEN", None)

    # 1. Python writes, vkformer reads offline.
    home_py = os.path.join(work, "hf_py")
    code = ("import huggingface_hub as h; print(h.__version__); print(h.snapshot_download('acme/tiny'))")
    out = subprocess.check_output([sys.executable, "-c", code], env=dict(env, HF_HOME=home_py), text=True).split()
    print("huggingface_hub", out[0], "->", out[1])
    snap_py = out[1]
    server.terminate()
    server.wait()
    off = dict(env, HF_HOME=home_py, HF_HUB_OFFLINE="1")
    got = subprocess.check_output([vkformer, "pull", "acme/tiny", "-q"], env=off, text=True).strip()
    assert got == snap_py, (got, snap_py)
    ids = subprocess.check_output([vkformer, "tokenize", "--tokenizer", "acme/tiny", "--no-special"], input='"t3 t4"\n',
                                  env=off, text=True).strip()
    assert ids == "[3,4]", ids
    subprocess.check_call([vkformer, "generate", "--model", "acme/tiny", "--prompt", "t3 t4", "--no-special",
                           "--max-new-tokens", "2"], env=off)
    print("1. vkformer used the cache written by huggingface_hub offline")

    # 2. vkformer writes, Python reads offline.
    server = subprocess.Popen([sys.executable, os.path.join(REPO, "tests/common/hub_server.py"), os.path.join(work, "root"),
                               "--port-file", ports + "2", "--max-seconds", "300"])
    while not os.path.exists(ports + "2"):
        time.sleep(0.05)
    endpoint = "http://127.0.0.1:%s" % open(ports + "2").read().split()[0]
    home_vk = os.path.join(work, "hf_vk")
    snap_vk = subprocess.check_output([vkformer, "pull", "acme/tiny", "-q"],
                                      env=dict(env, HF_ENDPOINT=endpoint, HF_HOME=home_vk), text=True).strip()
    server.terminate()
    server.wait()
    code = ("import huggingface_hub as h, sys\n"
            "s = h.snapshot_download('acme/tiny', local_files_only=True)\n"
            "f = h.hf_hub_download('acme/tiny', 'model.safetensors', local_files_only=True)\n"
            "for n in ('config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'):\n"
            "    assert isinstance(h.try_to_load_from_cache('acme/tiny', n), str), n\n"
            "print(s); print(f)\n")
    out = subprocess.check_output([sys.executable, "-c", code], env=dict(env, HF_HOME=home_vk, HF_HUB_OFFLINE="1"),
                                  text=True).split()
    assert out[0] == snap_vk, (out[0], snap_vk)
    assert filecmp.cmp(out[1], os.path.join(model, "model.safetensors"), shallow=False)
    print("2. huggingface_hub used the cache written by vkformer offline")

    # 3. Same entries, same link targets, same bytes.
    a, b = layout(os.path.join(home_py, "hub")), layout(os.path.join(home_vk, "hub"))
    if a != b:
        sys.exit("layouts differ:\n only python: %s\n only vkformer: %s\n different: %s" % (
            sorted(set(a) - set(b)), sorted(set(b) - set(a)), sorted(k for k in set(a) & set(b) if a[k] != b[k])))
    print("3. identical cache layouts (%d entries)" % len(a))


if __name__ == "__main__":
    main()
