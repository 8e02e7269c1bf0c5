#!/usr/bin/env bash
# bench/search/fmnist.sh — random vs ASHA vs TPE on real Fashion-MNIST
# training through scheduler + agent + hyperfarm-train, same total budget
# of epochs and same seeds; prints epochs to first reach val_acc >= 0.88
# and the best val_acc of each (see fmnist.py for the protocol).
#   bench/search/fmnist.sh [--seeds 1,2,3] [--budget 54] [--max-epochs 9] [--slots 2]
set -euo pipefail
exec python3 "$(dirname "$0")/fmnist.py" "$@"
