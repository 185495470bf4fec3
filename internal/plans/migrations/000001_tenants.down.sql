DROP TABLE IF EXISTS cellgate_tenants_version;
DROP TABLE IF EXISTS cellgate_tenants;
