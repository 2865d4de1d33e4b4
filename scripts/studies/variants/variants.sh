# The variants of results/variants/ as run-file settings, one line of --set options each
# (sourced by run.sh and convergence.sh). Streaming: P fragments, each all-reduce beside tau
# inner steps (5, the largest overlap of arXiv 2501.18512's runs; about 2 minutes of
# INTELLECT-1's compute at H = 100), alpha = 0 (the paper's default: the local fragment takes
# the updated outer one). Sparse (topk): SparseLoCo's blocking rule, top-k at 2 % with 2-bit values
# and error feedback (beta 0.95) in place of the outer momentum (0), all-gathered; topk-delayed:
# the same with its all-gather beside the next inner steps (diloco.overlap: delayed);
# stream4-topk: the same top-k with streaming's P = 4, tau = 5 (each fragment gathered at its sync).
variant_settings() {
  case $1 in
    none | delayed | eager) echo "--set diloco.overlap=$1" ;;
    stream4) echo "--set diloco.fragments=4 --set diloco.fragment_delay=5" ;;
    stream16) echo "--set diloco.fragments=16 --set diloco.fragment_delay=5" ;;
    stream4-fp4) echo "--set diloco.fragments=4 --set diloco.fragment_delay=5 --set diloco.codec=fp4" ;;
    topk) echo "--set diloco.codec=topk --set diloco.outer_momentum=0" ;;
    topk-delayed) echo "--set diloco.codec=topk --set diloco.outer_momentum=0 --set diloco.overlap=delayed" ;;
    stream4-topk) echo "--set diloco.codec=topk --set diloco.outer_momentum=0 --set diloco.fragments=4 --set diloco.fragment_delay=5" ;;
    *) echo "results/variants: unknown variant '$1' (none, delayed, eager, stream4, stream16, stream4-fp4, topk, topk-delayed, stream4-topk)" >&2
       return 2 ;;
  esac
}
