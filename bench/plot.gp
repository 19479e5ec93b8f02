# bench/plot.gp: the benchmark's figures, from the data files bench/run writes
# into build/bench/data/.  Called once per figure:
#   gnuplot -e "which='cdf'; datadir='...'; outfile='x.png'; configs='a b'; size='256'; ncols=7" \
#       bench/plot.gp
# which: cdf (fault-latency CDF at one size), arrivals (pages arrived over
# time at one size), downtime (per configuration and size), bysize (every
# figure against guest size), pagemap (one configuration's page map at one
# size), steps (median and p99 of each step of a demand fault, stacked),
# scale (bench/run --full: downtime and total time against guest size, and
# the total a constant push rate predicts).

set terminal pngcairo size 1100,700 font "DejaVu Sans,10" noenhanced
set output outfile
set grid
set key outside right top

# One colour per configuration, in the order bench/run lists them (up to 12,
# more than gnuplot's 8 default line colours, which made two lines alike),
# and QEMU's lines dashed, ours solid.
palette = "#9400d3 #009e73 #56b4e9 #e69f00 #f0e442 #0072b2 #d55e00 #000000 #cc79a7 #8b4513 #808080 #2e8b57"
colour(i) = word(palette, (i - 1) % words(palette) + 1)
cfg(i) = word(configs, i)
dash(c) = (strstrt(c, "qemu") == 1 ? 2 : 1)

if (which eq 'cdf') {
	set title sprintf("Demand-fault latency CDF, %s MiB guest, every fault of every run (ours: agent's stamps; QEMU: its trace events)", size)
	set logscale x 10
	set xlabel "fault -> page installed (microseconds, log)"
	set ylabel "fraction of demand faults <= x"
	set yrange [0:1.02]
	plot for [i=1:words(configs)] datadir.'/cdf_'.cfg(i).'_'.size.'.dat' using 1:2 \
		with steps lw 2 lc rgb colour(i) dt dash(cfg(i)) title cfg(i)
}

if (which eq 'arrivals') {
	set multiplot layout 1,2 title sprintf("Pages arrived at the destination after it resumed, %s MiB guest (ours: agent's per-page install times, bucketed; QEMU: its trace events)", size)
	set xlabel "time since the destination's vCPUs resumed (ms)"
	set ylabel "pages placed (cumulative, log)"
	set logscale y 10
	set key inside right bottom font ",8"
	set title "demand (requested by a fault)"
	plot for [i=1:words(configs)] datadir.'/arrivals_'.cfg(i).'_'.size.'.dat' \
		using 1:($2 > 0 ? $2 : NaN) with lines lw 2 lc rgb colour(i) dt dash(cfg(i)) title cfg(i)
	set title "pushed (background, incl. zero pages)"
	plot for [i=1:words(configs)] datadir.'/arrivals_'.cfg(i).'_'.size.'.dat' \
		using 1:($3 > 0 ? $3 : NaN) with lines lw 2 lc rgb colour(i) dt dash(cfg(i)) title cfg(i)
	unset multiplot
}

if (which eq 'downtime') {
	set title "Downtime (source pause to destination resume) per configuration and guest size; missing bar = run failed"
	set style data histograms
	set style histogram clustered gap 1
	set style fill solid 0.85 border -1
	set boxwidth 0.9
	set logscale y 10
	set yrange [0.05:*]
	set ylabel "downtime (ms, log)"
	set xlabel "guest size"
	plot for [i=2:ncols] datadir.'/downtime.dat' using i:xtic(1) lc rgb colour(i - 1) title columnheader(i)
}

if (which eq 'bysize') {
	# data: size, then median min max of downtime ms, total ms, MiB sent,
	# fault p50 us, fault p99 us, blocktime ms (columns 2-4, 5-7, ... 17-19)
	set multiplot layout 2,3 title "How each figure grows with guest size: median of the runs, bars min to max (x: MiB, log2)"
	set logscale x 2
	set logscale y 10
	set key inside left top font ",8"
	set xlabel "guest MiB"
	set ylabel "ms"
	set title "downtime"
	set yrange [0.05:5000]   # headroom for the key
	plot for [i=1:words(configs)] datadir.'/size_'.cfg(i).'.dat' using 1:2:3:4 \
		with yerrorlines lw 2 lc rgb colour(i) dt dash(cfg(i)) pt i title cfg(i)
	set title "total migration time"
	unset key
	set yrange [*:*]
	plot for [i=1:words(configs)] datadir.'/size_'.cfg(i).'.dat' using 1:5:6:7 \
		with yerrorlines lw 2 lc rgb colour(i) dt dash(cfg(i)) pt i title cfg(i)
	set title "bytes sent"
	set ylabel "MiB"
	plot for [i=1:words(configs)] datadir.'/size_'.cfg(i).'.dat' using 1:8:9:10 \
		with yerrorlines lw 2 lc rgb colour(i) dt dash(cfg(i)) pt i title cfg(i)
	set title "demand-fault latency p50"
	set ylabel "us"
	plot for [i=1:words(configs)] datadir.'/size_'.cfg(i).'.dat' using 1:11:12:13 \
		with yerrorlines lw 2 lc rgb colour(i) dt dash(cfg(i)) pt i title cfg(i)
	set title "demand-fault latency p99"
	plot for [i=1:words(configs)] datadir.'/size_'.cfg(i).'.dat' using 1:14:15:16 \
		with yerrorlines lw 2 lc rgb colour(i) dt dash(cfg(i)) pt i title cfg(i)
	set title "vCPU blocktime (sum of fault latencies)"
	set ylabel "ms"
	plot for [i=1:words(configs)] datadir.'/size_'.cfg(i).'.dat' using 1:17:18:19 \
		with yerrorlines lw 2 lc rgb colour(i) dt dash(cfg(i)) pt i title cfg(i)
	unset multiplot
}

if (which eq 'pagemap') {
	# data: four blocks (index 0 pushed, 1 zero, 2 precopy, 3 demand): ms MiB
	if (exists("datafile")) {
		set title sprintf("Page map: %s", configs)
	} else {
		set title sprintf("Page map: %s, %s MiB guest (median run): each installed page, guest address against time since the destination's vCPUs started", configs, size)
		datafile = datadir.'/pagemap_'.configs.'_'.size.'.dat'
	}
	set xlabel "time since the vCPUs started at the destination (ms; < 0: installed during the switch-over)"
	set ylabel "guest address (MiB)"
	set key outside right top
	f = datafile
	# A page is a dot, but a dot in the key is a pixel nobody sees: each kind's
	# key is drawn by an empty plot (NaN) with a mark large enough to show
	# its colour, and the data plots carry no title.
	plot f index 0 using 1:2 with dots lc rgb '#4a90d9' notitle, \
	     NaN with points pt 5 ps 1.5 lc rgb '#4a90d9' title 'pushed', \
	     f index 1 using 1:2 with dots lc rgb '#b0b0b0' notitle, \
	     NaN with points pt 5 ps 1.5 lc rgb '#b0b0b0' title 'zero (pushed as a marker)', \
	     f index 2 using 1:2 with dots lc rgb '#2ca02c' notitle, \
	     NaN with points pt 5 ps 1.5 lc rgb '#2ca02c' title 'precopy', \
	     f index 3 using 1:2 with points pt 7 ps 0.5 lc rgb '#d62728' notitle, \
	     NaN with points pt 7 ps 1.5 lc rgb '#d62728' title 'demand (requested by a fault)'
}

if (which eq 'steps') {
	set multiplot layout 1,2 title sprintf("Where a demand fault's time goes, %s MiB guest (ours: agent stamps on one clock; faults served by their reply)", size)
	set style data histograms
	set style histogram rowstacked
	set style fill solid 0.85 border -1
	set boxwidth 0.6
	set ylabel "microseconds"
	set key outside bottom center maxrows 3 font ",8"
	set xtics rotate by -20 font ",8"
	set title "median of each step"
	plot for [i=2:6] datadir.'/fault_steps_p50.dat' using i:xtic(1) title columnheader(i)
	set title "p99 of each step (their sum is not the p99 of the total)"
	unset key
	plot for [i=2:6] datadir.'/fault_steps_p99.dat' using i:xtic(1) title columnheader(i)
	unset multiplot
}

if (which eq 'scale') {
	# data (scale.dat): MiB, downtime ms median min max, total ms median
	# min max, MiB / push rate (ms, the total the push alone would take)
	set offsets graph 0.04, graph 0.04, 0, 0  # the end points' bars inside the frame
	set multiplot layout 1,2 title sprintf("%s against guest size: median of the runs, bars min to max (x: MiB, log2)", configs)
	set logscale x 2
	set xlabel "guest MiB"
	set key inside left top font ",9"
	set title "downtime (flat is the aim)"
	set ylabel "ms"
	set yrange [0:*]
	plot datadir.'/scale.dat' using 1:2:3:4 with yerrorlines lw 2 lc rgb colour(1) title "downtime"
	set title "total migration time (linear in the push rate is the aim)"
	set logscale y 10
	set yrange [*:*]
	plot datadir.'/scale.dat' using 1:5:6:7 with yerrorlines lw 2 lc rgb colour(1) title "total", \
		datadir.'/scale.dat' using 1:8 with linespoints dt 2 lw 2 lc rgb colour(2) title "size / push rate"
	unset multiplot
}
