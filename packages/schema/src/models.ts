import { Type } from '@sinclair/typebox';
import { MODEL_KINDS } from './headers.js';

const Kind = Type.Union(MODEL_KINDS.map((k) => Type.Literal(k)));

export const ModelA = Type.Object(
  { id: Type.String(), object: Type.Literal('model'), created: Type.Integer(), kind: Kind, owned_by: Type.String() },
  { additionalProperties: true },
);

export const ModelB = Type.Object(
  {
    id: Type.String(),
    created: Type.Integer(),
    owned_by: Type.String(),
    providers: Type.Array(Type.String()),
    regions: Type.Array(Type.String()),
    capabilities: Type.Array(Type.String()),
    context_window: Type.Integer(),
    pricing: Type.Object({
      prompt_per_1m: Type.Number(),
      completion_per_1m: Type.Number(),
      currency: Type.String(),
      /** Rerank and audio models: the price of one `unit` (a search unit, a second of audio). */
      per_unit: Type.Optional(Type.Number()),
      unit: Type.Optional(Type.Union([Type.Literal('search_unit'), Type.Literal('audio_second')])),
    }),
  },
  { additionalProperties: true },
);

export const ModelListA = Type.Object({ object: Type.Literal('list'), data: Type.Array(ModelA) });
export const ModelListB = Type.Object({ object: Type.Literal('list'), data: Type.Array(ModelB) });

export const ModelsQueryA = Type.Object({ kind: Type.Optional(Kind) }, { additionalProperties: false });
export const ModelsQueryB = Type.Object(
  {
    family: Type.Optional(Type.String({ minLength: 1 })),
    capability: Type.Optional(Type.String({ minLength: 1 })),
    provider: Type.Optional(Type.String({ minLength: 1 })),
  },
  { additionalProperties: false },
);
export const ModelParams = Type.Object({ id: Type.String({ minLength: 1 }) });
/** `/models/{family}/{model}`: the id's slash sent as it is, as a proxy that decodes %2F passes it on. */
export const SlashedModelParams = Type.Object({ family: Type.String({ minLength: 1 }), model: Type.String({ minLength: 1 }) });
