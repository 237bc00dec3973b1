#!/usr/bin/env bash
# Regenerates the mirror table of docs/strategies.md: peak and step time of
# none / mirror / mirror-cost on five zoo models (batch 32, GPT batch 8), on an
# A100-40GB with the ideal allocator (live bytes), as Markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o /tmp/remat-sim ./cmd/sim
echo "| model | batch | none peak | mirror peak | mirror change | mirror overhead | mirror-cost peak | mirror-cost change | mirror-cost overhead |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for spec in resnet50:32 vgg16:32 densenet121:32 mobilenet_v2:32 gpt:8; do
  m=${spec%%:*}; b=${spec##*:}
  /tmp/remat-sim report --model "$m" --batch "$b" --device a100-40gb --allocator ideal \
      --strategies none,mirror,mirror-cost --format csv |
    awk -F, -v m="$m" -v b="$b" '
      function gib(x) { return sprintf("%.2f GiB", x / 1073741824) }
      NR == 2 { np = $3 }
      NR == 3 { mp = $3; mc = $5; mo = $7 }
      NR == 4 { cp = $3; cc = $5; co = $7
        printf "| %s | %s | %s | %s | %+.1f%% | %.3fx | %s | %+.1f%% | %.3fx |\n", m, b, gib(np), gib(mp), 100*mc, mo, gib(cp), 100*cc, co }'
done
