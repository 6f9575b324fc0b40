#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The layer check (devtools/check-layers.py) on small trees it must pass and trees it must
# refuse, each refusal with its line: an include up the layers, a third-party header outside
# its folders, a header name that two files share, and the tree's own PENDING entry gone.
# Usage: check-layers-selftest.sh <check-layers.py>
set -u
check=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "check-layers-selftest: $*"; failed=1; }

tree() { # NAME: a fresh tree with one header per layer that includes nothing
	rm -rf "${tmp:?}/$1"
	mkdir -p "$tmp/$1"/{lib/common,lib/mem,lib/mr,drivers/mlx5,drivers/emu/mlx5,api,fabric,include/nicmr,test}
	echo '#include <cstdint>' >"$tmp/$1/lib/common/nicmr_log.h"
	echo '#include "nicmr_log.h"' >"$tmp/$1/lib/mem/mem_pool.h"
	echo '#include "mem_pool.h"' >"$tmp/$1/drivers/mlx5/mlx5_device.h"
	echo '#include "mlx5_device.h"' >"$tmp/$1/api/api_internal.h"
	echo '#include "nicmr/nicmr.h"' >"$tmp/$1/fabric/fi_mr.cpp"
	echo '#include <rdma/fabric.h>' >>"$tmp/$1/fabric/fi_mr.cpp"
	echo '#include <cstdint>' >"$tmp/$1/include/nicmr/nicmr.h"
	# Tests look at any layer.
	echo '#include "api_internal.h"' >"$tmp/$1/test/t.cpp"
	echo '#include "emu_mlx5.h"' >>"$tmp/$1/test/t.cpp"
	echo '#include <cstdint>' >"$tmp/$1/drivers/emu/mlx5/emu_mlx5.h"
}
expect() { # NAME RC [LINE-REGEX]
	local out rc
	out=$(python3 "$check" "$tmp/$1")
	rc=$?
	[ "$rc" = "$2" ] || fail "$1: exit $rc, expected $2: $out"
	if [ $# -gt 2 ] && ! grep -Eq "$3" <<<"$out"; then
		fail "$1: no line matching '$3' in: $out"
	fi
}

tree clean
expect clean 0 'check-layers: [0-9]+ includes checked in [0-9]+ files, 0 running'

tree up
echo '#include "mlx5_device.h"' >>"$tmp/up/lib/mem/mem_pool.h"
expect up 1 '^lib/mem/mem_pool.h:2: lib/mem may not include mlx5_device.h \(drivers/mlx5\)$'

tree model
echo '#include "mlx5_device.h"' >"$tmp/model/drivers/emu/mlx5/emu_mlx5.h"
expect model 1 '^drivers/emu/mlx5/emu_mlx5.h:1: drivers/emu may not include mlx5_device.h'

tree driver_sees_model
echo '#include "emu_mlx5.h"' >>"$tmp/driver_sees_model/drivers/mlx5/mlx5_device.h"
expect driver_sees_model 1 '^drivers/mlx5/mlx5_device.h:2: drivers/mlx5 may not include emu_mlx5.h'

tree provider_below_api
echo '#include "api_internal.h"' >>"$tmp/provider_below_api/fabric/fi_mr.cpp"
expect provider_below_api 1 '^fabric/fi_mr.cpp:3: fabric may not include api_internal.h \(api\)$'

tree external
echo '#include <infiniband/mlx5dv.h>' >>"$tmp/external/fabric/fi_mr.cpp"
echo '#include <rdma/fabric.h>' >>"$tmp/external/lib/mr/mr_access.h"
expect external 1 '^fabric/fi_mr.cpp:3: fabric may not include <infiniband/mlx5dv.h>'

tree fi_in_engine
echo '#include <rdma/fi_domain.h>' >"$tmp/fi_in_engine/lib/mr/mr_keys.h"
expect fi_in_engine 1 '^lib/mr/mr_keys.h:1: lib/mr may not include <rdma/fi_domain.h>'

tree wiring
echo '#include "emu_mlx5.h"' >>"$tmp/wiring/api/api_internal.h"
expect wiring 1 '^api/api_internal.h:2: only api/api_device.cpp, api/api_wiring.h may include emu_mlx5.h \(drivers/emu\)$'
echo '#include "emu_mlx5.h"' >"$tmp/wiring/api/api_internal.h"
echo '#include "emu_mlx5.h"' >"$tmp/wiring/api/api_wiring.h"
expect wiring 1 '^api/api_internal.h:1: only'
echo '#include "api_wiring.h"' >"$tmp/wiring/api/api_internal.h"
expect wiring 0

tree ambiguous
echo '#include <cstdint>' >"$tmp/ambiguous/lib/mr/mem_pool.h"
expect ambiguous 1 '"mem_pool.h" is ambiguous'

# The tree's PENDING entries: present, tolerated; gone from their file, a failure.
tree pending
echo '#include <rdma/fabric.h>' >"$tmp/pending/lib/mr/mr_access.h"
echo '#include <infiniband/verbs.h>' >>"$tmp/pending/lib/mr/mr_access.h"
if grep -q "('lib/mr/mr_access.h', 'rdma/fabric.h')" "$check"; then
	expect pending 0
	echo '#include <infiniband/verbs.h>' >"$tmp/pending/lib/mr/mr_access.h"
	expect pending 1 '^lib/mr/mr_access.h: no longer includes <rdma/fabric.h>: take it out of PENDING$'
else
	expect pending 1 '^lib/mr/mr_access.h:1: lib/mr may not include <rdma/fabric.h>'
fi

tree empty
rm -rf "$tmp/empty"/{lib,drivers,api,fabric,include}
expect empty 1 '0 includes checked'

[ "$failed" = 0 ] && echo "check-layers-selftest: every case as expected"
exit "$failed"
