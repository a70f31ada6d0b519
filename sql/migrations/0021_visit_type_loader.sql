-- revisit schema: a visit type names the loader that visits its origins (issue
-- 31), so the git visit type can run the archive's swh-loader-git (loader
-- swh-git) instead of revisit's own git loader. Null: the loader named like the
-- visit type.

alter table visit_types add column loader text;
comment on column visit_types.loader is 'Entry point (group revisit.loaders) of the loader that visits this type''s origins; null: the one named like the visit type';
