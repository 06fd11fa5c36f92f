# TTFA per response_format (CPU, tiny dummy checkpoint): our server started once with the `default` profile,
# then the served benchmark at 1 and 4 streams for each format against it. From the project's root, in the tox env.
D=benchmarks/results/2026-12-05-cpu-formats
CK=$(python -c "from higgs_dummy.cache import cached_checkpoint; print(cached_checkpoint('tiny', 0, 'no_eoc'))" | tail -1)
python -m reference.serve --profile default --model $CK --platform cpu --port 8123 --served-model-name higgs-tiny \
    --log-level warning > /tmp/formats-server.log 2>&1 & pid=$!
until python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8123/health', timeout=2)" 2>/dev/null; do sleep 2; done
for f in pcm wav mp3 opus aac flac; do
  python -m benchmarks.served --base-url http://127.0.0.1:8123 --concurrency 1 4 --response-format $f \
      --out-dir $D/$f > $D/$f.txt 2>&1
done
kill $pid
