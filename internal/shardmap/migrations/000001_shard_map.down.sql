DROP TABLE IF EXISTS cellgate_shard_map_applied;
DROP TABLE IF EXISTS cellgate_shard_map;
