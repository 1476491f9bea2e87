CREATE TABLE "idempotency_keys" (
	"scope" text PRIMARY KEY NOT NULL,
	"fingerprint" text NOT NULL,
	"owner" text NOT NULL,
	"state" text NOT NULL,
	"answer" jsonb,
	"expires_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "idempotency_keys_expires_idx" ON "idempotency_keys" USING btree ("expires_at");