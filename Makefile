# mgrp — the two commands of the README are `make demo` and `make test` (as root).

CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: deps build demo dashboard test lint unit clean-testbeds fuzz

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace

# The main job on its self-contained default: a namespace testbed with a 20 Mbit/s bottleneck,
# a 20 ms delay line, the seeds' STEP cross traffic (scaled x2), agents at both ends tracking
# the path as the service does (one lean search, then short checks; at most 2% of C over any
# trailing minute), each estimate printed beside the ground truth of its second and the probe
# load of the minute before it. A level every 15 s (the seed's 45 s compressed 3x), not 10:
# at 2% of 20 Mbit/s (3 MB a minute) the first search (~0.85 MB) and a re-search per step
# (~0.3-0.45 MB) leave no room for a fifth step in the first minute; with 10 s levels the
# last one waited for the budget (docs/tracking.md, "Fourteenth round").
demo: build
	./target/release/mgrp testbed run --capacity 20mbit --delay 20ms \
	    --cross step:2,6,10,12,8,4mbit,every=15s --duration 90s --track --out target/demo.json

# The estimation service on the same testbed for 10 minutes, STEP cross traffic 15 s a step:
# open http://127.0.0.1:7241/ and watch available bandwidth follow the steps (Ctrl-C to stop).
dashboard: build
	./target/release/mgrp testbed run --capacity 20mbit --delay 20ms \
	    --cross step:2,6,10,12,8,4mbit,every=15s --duration 10m --report-every 10s --dashboard

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace --lib

# Everything: formatting, lints, unit tests, namespace tests. Release build: the tests that time
# probe trains on the testbed must run the code as it is shipped (a debug build's per-probe cost
# shows up as pacing error and skews estimates).
# --no-fail-fast, and the Python client's tests even when a Rust test failed: a red run shows every
# failure, not just the first. The Python client's live tests use the binary the test build just
# made (target/release/mgrp; run-tests.sh builds it only if missing): a separate
# `cargo build -p mgrp-cli` rebuilt it for 2 minutes, the test build's dev-dependency features differ.
test: deps lint
	@status=0; \
	$(CARGO) test --workspace --release --no-fail-fast || status=1; \
	clients/python/run-tests.sh -q || status=1; \
	exit $$status

# Remove testbeds whose owner died (a crashed run or test).
clean-testbeds:
	./target/release/mgrp testbed down --stale || ./target/debug/mgrp testbed down --stale

# Fuzz the wire decoders for a minute each (needs a nightly toolchain and `cargo install cargo-fuzz`).
fuzz:
	cd crates/wire && for t in probe_decode control_decode; do \
	    $(CARGO) +nightly fuzz run $$t -- -max_total_time=60 || exit 1; done
