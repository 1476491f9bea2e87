CREATE TABLE "gateway_instances" (
	"id" text PRIMARY KEY NOT NULL,
	"alive_until" timestamp with time zone NOT NULL
);
