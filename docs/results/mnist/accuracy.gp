set terminal pngcairo size 800,500
set output 'accuracy.png'
set title 'MNIST test accuracy per epoch'
set xlabel 'epoch'
set ylabel 'test accuracy (%)'
set key bottom right
set grid
set xtics 1
set datafile missing 'NaN'
plot 'accuracy.dat' index 0 using 1:2 with linespoints title 'serial', \
     'accuracy.dat' index 1 using 1:2 with linespoints title '2 workers', \
     'accuracy.dat' index 2 using 1:2 with linespoints title '4 workers'
