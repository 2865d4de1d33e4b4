#!/usr/bin/env bash
# Draws loss_curves.svg (validation loss of the (outer) parameters against total tokens) from
# the four CSVs of run.sh. usage: results/convergence/plot.sh
set -euo pipefail
cd "$(dirname "$0")"
gnuplot <<'GP'
set terminal svg size 800,500 dynamic font "sans,12"
set output "loss_curves.svg"
set datafile separator ","
set key autotitle columnhead
set key top right
set grid
set xlabel "tokens (all nodes)"
set ylabel "validation loss (nats/token)"
set title "model small (12.6M), equal tokens: 1 worker x 4 batch vs DiLoCo 4 nodes, H = 50"
plot "1_single_batch16.csv" using 2:4 with linespoints title "1 worker, batch 16", \
     "2_diloco_fp32.csv" using 4:6 with linespoints title "DiLoCo 4 x batch 4, fp32", \
     "3_diloco_int8.csv" using 4:6 with linespoints title "DiLoCo, int8", \
     "4_diloco_int8_churn.csv" using 4:6 with linespoints title "DiLoCo, int8, churn"
GP
