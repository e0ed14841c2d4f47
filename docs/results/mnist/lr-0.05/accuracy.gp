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
     'accuracy.dat' index 2 using 1:2 with linespoints title '4 workers', \
     'accuracy.dat' index 3 using 1:2 with linespoints title '2 workers, fp16', \
     'accuracy.dat' index 4 using 1:2 with linespoints title '2 workers, fp8-e4m3', \
     'accuracy.dat' index 5 using 1:2 with linespoints title '2 workers, fp8-e5m2', \
     'accuracy.dat' index 6 using 1:2 with linespoints title '4 workers, fp16', \
     'accuracy.dat' index 7 using 1:2 with linespoints title '4 workers, fp8-e4m3', \
     'accuracy.dat' index 8 using 1:2 with linespoints title '4 workers, fp8-e5m2'
