-- Fewer rewrites of each row by background merges (write amplification).
--
-- Streaming pushes arrive as group-commit inserts of ~20,000 rows, one part each, and the
-- default merge selector (base 5) rewrites each row about once per factor of 5 in part size
-- on its way to the large parts. On the 2-core embedded store those merges took more CPU than
-- the inserts themselves (bench ingest-fleet: 5.5-6.6 ms of 17-19 ms server CPU per
-- 2,000-sample push). Base 10 merges about twice as many parts at once, so each row is
-- rewritten fewer times; a partition holds somewhat more active parts between merges (a
-- 12,000,000-row sustained insert of 19,000-row parts, measured: 55 active parts at its end
-- instead of 45, 2.24 instead of 2.62 us CPU per row with its merges). Queries read a few more
-- parts; the rollups, written in larger blocks, follow the same rule.
ALTER TABLE samples$LOCAL $ON_CLUSTER MODIFY SETTING merge_selector_base = 10;

ALTER TABLE samples_1m$LOCAL $ON_CLUSTER MODIFY SETTING merge_selector_base = 10;

ALTER TABLE band_1m$LOCAL $ON_CLUSTER MODIFY SETTING merge_selector_base = 10
