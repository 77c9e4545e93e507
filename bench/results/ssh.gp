set terminal png size 1600,650
set output './ssh.png'
set multiplot layout 1,2
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key top right
set logscale y
set yrange [0.005:5]
set ylabel 'speed against rsync -a over ssh (1 = rsync)'
set title 'haul over ssh against rsync, scp, sftp'
set xtics font ',8'
set bmargin 6
plot './ssh-speed.dat' using 2:xtic(1) title 'haul-tcp' , './ssh-speed.dat' using 3:xtic(1) title 'haul-quic' , './ssh-speed.dat' using 4:xtic(1) title 'haul-tunnel' , './ssh-speed.dat' using 5:xtic(1) title 'scp' , './ssh-speed.dat' using 6:xtic(1) title 'sftp', 1 with lines lc rgb 'black' dt 2 notitle
unset logscale y
set yrange [0:*]
set ylabel 'T(8) / T(1)'
set title 'fan-out to 8 lab hosts over ssh (1 = as fast as one host)'
set xtics font ',9' rotate by -25
set key off
plot './ssh-fanout.dat' using 2:xtic(1) lc rgb '#4477aa', 1.15 with lines lc rgb 'red' dt 2 title 'target 1.15'
unset multiplot
