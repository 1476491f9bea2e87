CREATE TABLE "budget_holds" (
	"scope_id" text NOT NULL,
	"request_id" text NOT NULL,
	"nano" bigint NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	CONSTRAINT "budget_holds_scope_id_request_id_pk" PRIMARY KEY("scope_id","request_id")
);
--> statement-breakpoint
CREATE INDEX "budget_holds_request_idx" ON "budget_holds" USING btree ("request_id");--> statement-breakpoint
-- Reserves `p_nano` (1e-9 EUR) for request `p_request` against the budgets of workspaces `p_ws` and keys
-- `p_keys`, or returns the scope id ('ws:<id>' or 'key:<id>') that has no room for it. The rows are locked
-- first, in the usage flush's order (workspaces, then keys, by id), so the two never deadlock; the check
-- that follows runs on a new snapshot, so it sees every hold and spend committed while it waited.
CREATE FUNCTION gw_budget_reserve(p_ws text[], p_keys text[], p_nano bigint, p_request text, p_ttl_ms integer) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_scopes text[] := ARRAY(SELECT 'ws:' || x FROM unnest(p_ws) x) || ARRAY(SELECT 'key:' || x FROM unnest(p_keys) x);
  v_refused text;
BEGIN
  PERFORM 1 FROM workspaces WHERE id = ANY(p_ws) ORDER BY id FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id = ANY(p_keys) ORDER BY id FOR UPDATE;
  DELETE FROM budget_holds WHERE scope_id = ANY(v_scopes) AND expires_at <= now();
  SELECT b.scope_id INTO v_refused
  FROM (
    SELECT 'ws:' || id AS scope_id, budget, spent FROM workspaces WHERE id = ANY(p_ws)
    UNION ALL
    SELECT 'key:' || id, budget, spent FROM api_keys WHERE id = ANY(p_keys)
  ) b
  LEFT JOIN (SELECT scope_id, sum(nano) AS held FROM budget_holds WHERE scope_id = ANY(v_scopes) GROUP BY scope_id) h USING (scope_id)
  WHERE b.budget IS NOT NULL AND (b.spent >= b.budget OR b.spent + (coalesce(h.held, 0) + p_nano) / 1e9 > b.budget)
  LIMIT 1;
  IF v_refused IS NOT NULL THEN
    RETURN v_refused;
  END IF;
  INSERT INTO budget_holds (scope_id, request_id, nano, expires_at)
  SELECT s, p_request, p_nano, now() + p_ttl_ms * interval '1 millisecond' FROM unnest(v_scopes) s
  ON CONFLICT (scope_id, request_id) DO UPDATE SET nano = EXCLUDED.nano, expires_at = EXCLUDED.expires_at;
  RETURN NULL;
END
$$;
