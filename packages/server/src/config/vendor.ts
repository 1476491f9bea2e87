import type { OpenAiVendor, ProviderConfig } from '@gw/schema';

/** The provider behind an entry: its type, or for an `openai`-type entry its host (or the config's `vendor`). */
export type Vendor = 'mistral' | 'azure' | 'cohere' | OpenAiVendor;

/** Hosts of the OpenAI-compatible providers whose rules differ (PROVIDERS.md 5-8, 10, 12). */
const HOSTS: readonly [RegExp, OpenAiVendor][] = [
  [/^api\.scaleway\.ai$/i, 'scaleway'],
  [/(^|\.)endpoints\.kepler\.ai\.cloud\.ovh\.net$/i, 'ovhcloud'],
  [/(^|\.)ionos\.com$/i, 'ionos'],
  [/(^|\.)nebius\.(ai|com)$/i, 'nebius'],
  [/(^|\.)cohere\.(ai|com)$/i, 'cohere'],
  [/-aiplatform\.googleapis\.com$/i, 'vertex'],
];

/** The provider at `url`, by its host; `generic` for any other (a vLLM server, a proxy). */
export function vendorOfHost(url: URL): OpenAiVendor {
  for (const [host, vendor] of HOSTS) if (host.test(url.hostname)) return vendor;
  return 'generic';
}

/** The provider of a config entry: its type, or the `vendor` it names, or its host. */
export function vendorOf(config: ProviderConfig): Vendor {
  if (config.type !== 'openai') return config.type;
  return config.vendor ?? vendorOfHost(new URL(config.baseUrl));
}
