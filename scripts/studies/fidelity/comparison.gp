# All-reduce time per outer step, real (shaped namespaces) against simulated; data from
# compare.py (comparison.dat: one block per run, in run.sh's order: int8, fp32, int8-rtt0, int8-rtt30,
# int8-noidlerestart).
# Run from the repository root (run.sh table does).
set terminal pngcairo size 1150,540 font ",11"
set output "results/fidelity/comparison.png"
set title "4 nodes x 100 Mbit/s: all-reduce per outer step, real (solid) vs simulated (dashed)" noenhanced
set xlabel "outer step"
set ylabel "all-reduce time, slowest node (s)"
set key outside right top
set grid ytics
set yrange [0:*]
set xtics 1
f = "results/fidelity/comparison.dat"
name(i) = i == 0 ? "int8, RTT 60 ms" : (i == 1 ? "fp32, RTT 60 ms" : (i == 2 ? "int8, RTT 0" : (i == 3 ? "int8, RTT 30 ms" : "int8, 60 ms, no idle restart")))
plot for [i=0:4] f index i using 1:2 with linespoints lw 2 pt 7 dt 1 lc i+1 \
       title name(i)." real", \
     for [i=0:4] f index i using 1:4 with linespoints lw 2 pt 5 dt 2 lc i+1 \
       title name(i)." simulated"
set terminal svg size 1150,540 font ",11"
set output "results/fidelity/comparison.svg"
replot
