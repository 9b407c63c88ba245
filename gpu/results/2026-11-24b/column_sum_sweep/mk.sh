set -e
jobs=()
for B in 32 64 128; do for S in 4 8 16 32; do for C in 1 2 4 8; do for U in 1 4; do for V in 1 4; do
  [ $((B*S)) -le 1024 ] || continue
  echo "nvcc -arch=sm_90 -cubin -o cs_${B}_${S}_${C}_${U}_${V}.cubin -DBLOCK=$B -DSPLIT=$S -DCLUSTER=$C -DUNROLL=$U -DVEC=$V cs.cu"
done; done; done; done; done > jobs.txt
wc -l jobs.txt
xargs -P 2 -I{} sh -c "{}" < jobs.txt
