import { type Static, Type } from '@sinclair/typebox';
import { PAGE_SIZE, VISIBLE_NAME } from './patterns.js';

// EUR; the store keeps 12 digits before the decimal point (numeric(24, 12)).
const Money = Type.Number({ minimum: 0, exclusiveMaximum: 1e12 });
const ModelId = Type.String({ minLength: 1, maxLength: 200 });
const Name = Type.String({ minLength: 1, maxLength: 200, pattern: VISIBLE_NAME });

export const CreateWorkspaceBody = Type.Object(
  {
    name: Name,
    enabledModels: Type.Optional(Type.Union([Type.Array(ModelId), Type.Null()])),
    budget: Type.Optional(Type.Union([Money, Type.Null()])),
  },
  { additionalProperties: false },
);
export type CreateWorkspaceBody = Static<typeof CreateWorkspaceBody>;

export const PatchWorkspaceBody = Type.Object(
  {
    name: Type.Optional(Name),
    enabledModels: Type.Optional(Type.Union([Type.Array(ModelId), Type.Null()])),
    budget: Type.Optional(Type.Union([Money, Type.Null()])),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type PatchWorkspaceBody = Static<typeof PatchWorkspaceBody>;

export const Workspace = Type.Object({
  id: Type.String(),
  name: Type.String(),
  enabledModels: Type.Union([Type.Array(Type.String()), Type.Null()]),
  budget: Type.Union([Type.Number(), Type.Null()]),
  spent: Type.Number(),
});

export const CreateKeyBody = Type.Object(
  {
    // null is none, as the answers show it (and as left out).
    name: Type.Optional(Type.Union([Name, Type.Null()])),
    workspaceId: Type.Optional(Type.Union([Type.String({ minLength: 1 }), Type.Null()])),
    // The default is documentation only (the route's ajv fills none in): the handler applies DEFAULT_RPM.
    rateLimitRpm: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000, default: 60 })),
    budget: Type.Optional(Type.Union([Money, Type.Null()])),
  },
  { additionalProperties: false },
);
export type CreateKeyBody = Static<typeof CreateKeyBody>;

export const PatchKeyBody = Type.Object(
  {
    rateLimitRpm: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000 })),
    budget: Type.Optional(Type.Union([Money, Type.Null()])),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type PatchKeyBody = Static<typeof PatchKeyBody>;

export const KeyView = Type.Object({
  id: Type.String(),
  name: Type.Union([Type.String(), Type.Null()]),
  workspaceId: Type.Union([Type.String(), Type.Null()]),
  rateLimitRpm: Type.Integer(),
  budget: Type.Union([Type.Number(), Type.Null()]),
  spent: Type.Number(),
  revoked: Type.Boolean(),
});

export const CreatedKey = Type.Object({
  id: Type.String(),
  key: Type.String(),
  name: Type.Union([Type.String(), Type.Null()]),
  workspaceId: Type.Union([Type.String(), Type.Null()]),
  rateLimitRpm: Type.Integer(),
  budget: Type.Union([Type.Number(), Type.Null()]),
});

export const KeyParams = Type.Object({ id: Type.String({ minLength: 1 }) });

export const RebuildResult = Type.Object({
  models: Type.Integer(),
  providers: Type.Record(Type.String(), Type.Union([Type.Literal('ok'), Type.Literal('stale'), Type.Literal('error')])),
  /** Configured models none of whose offers a provider lists now (left out of the registry). */
  unlisted: Type.Array(Type.String()),
});

export const WorkspaceParams = Type.Object({ id: Type.String({ minLength: 1 }) });

/** Paging of the admin lists. */
const PageFields = {
  limit: Type.Optional(Type.String({ pattern: PAGE_SIZE, description: 'rows per page, 1 to 100 (default 20)' })),
  after: Type.Optional(Type.String({ minLength: 1, description: 'the id of the last row of the page before' })),
};

export const WorkspaceListQuery = Type.Object(PageFields, { additionalProperties: false });
export const KeyListQuery = Type.Object(
  { ...PageFields, workspaceId: Type.Optional(Type.String({ minLength: 1, description: 'only the keys of this workspace' })) },
  { additionalProperties: false },
);

/** A page of a list, newest first; `hasMore`: pass the last row's id as `after` for the next. */
export const WorkspaceList = Type.Object({ data: Type.Array(Workspace), hasMore: Type.Boolean() });
export const KeyList = Type.Object({ data: Type.Array(KeyView), hasMore: Type.Boolean() });
