-- The service schema at commit f76c283 (before migrations existed), as create_all made it (sqlite).

CREATE TABLE tenants (
	name VARCHAR(64) NOT NULL, 
	token_hash VARCHAR(64) NOT NULL, 
	shadow BOOLEAN NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (name), 
	UNIQUE (token_hash)
);

CREATE TABLE jobs (
	id VARCHAR(32) NOT NULL, 
	tenant VARCHAR(64) NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	external_ref VARCHAR(500) NOT NULL, 
	target VARCHAR(64) NOT NULL, 
	target_options JSON NOT NULL, 
	detector VARCHAR(500) NOT NULL, 
	metric VARCHAR(200) NOT NULL, 
	mode VARCHAR(3) NOT NULL, 
	grace_period_s FLOAT NOT NULL, 
	gpus INTEGER NOT NULL, 
	expected_duration_s FLOAT, 
	shadow BOOLEAN NOT NULL, 
	override VARCHAR(16), 
	state VARCHAR(16) NOT NULL, 
	last_step BIGINT, 
	created_at FLOAT NOT NULL, 
	stopped_at FLOAT, 
	PRIMARY KEY (id), 
	FOREIGN KEY(tenant) REFERENCES tenants (name)
);

CREATE INDEX ix_jobs_tenant ON jobs (tenant);

CREATE TABLE decisions (
	id INTEGER NOT NULL, 
	job_id VARCHAR(32) NOT NULL, 
	source VARCHAR(16) NOT NULL, 
	decision VARCHAR(16) NOT NULL, 
	shadow BOOLEAN NOT NULL, 
	enforced BOOLEAN NOT NULL, 
	reason VARCHAR(1000) NOT NULL, 
	detector VARCHAR(500) NOT NULL, 
	step BIGINT, 
	n_evals INTEGER NOT NULL, 
	best_step BIGINT, 
	best_score FLOAT, 
	best_checkpoint_uri VARCHAR(2000), 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_decisions_job_source UNIQUE (job_id, source), 
	FOREIGN KEY(job_id) REFERENCES jobs (id)
);

CREATE TABLE scores (
	id INTEGER NOT NULL, 
	job_id VARCHAR(32) NOT NULL, 
	metric VARCHAR(200) NOT NULL, 
	step BIGINT NOT NULL, 
	value FLOAT NOT NULL, 
	checkpoint_uri VARCHAR(2000), 
	progress FLOAT, 
	loss FLOAT, 
	ts FLOAT, 
	received_at FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_scores_job_metric_step UNIQUE (job_id, metric, step), 
	FOREIGN KEY(job_id) REFERENCES jobs (id)
);

CREATE TABLE outbox (
	id INTEGER NOT NULL, 
	decision_id BIGINT NOT NULL, 
	job_id VARCHAR(32) NOT NULL, 
	phase VARCHAR(16) NOT NULL, 
	attempts INTEGER NOT NULL, 
	next_attempt_at FLOAT NOT NULL, 
	lease_until FLOAT, 
	lease_owner VARCHAR(32), 
	signalled_at FLOAT, 
	last_error VARCHAR(1000), 
	created_at FLOAT NOT NULL, 
	delivered_at FLOAT, 
	PRIMARY KEY (id), 
	UNIQUE (decision_id), 
	FOREIGN KEY(decision_id) REFERENCES decisions (id), 
	FOREIGN KEY(job_id) REFERENCES jobs (id)
);

CREATE INDEX ix_outbox_due ON outbox (phase, next_attempt_at);
