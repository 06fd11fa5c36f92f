# On the GPU host, each staging call: the chunks it carries moved out of the call's tree. The bundles' parts were
# re-split here into 51 MiB chunks (`cat part-* | split -b 51M -d -a 2 - chunk-`): 65 of 0.33.0, 8 of 0.26.0.
mkdir -p ~/chunks033 ~/chunks026
mv .device-bundle/chunks033/chunk-* ~/chunks033/ 2>/dev/null; mv .device-bundle/chunks026/chunk-* ~/chunks026/ 2>/dev/null
echo "staged: $(ls ~/chunks033 | wc -l) of 65, $(ls ~/chunks026 | wc -l) of 8"
