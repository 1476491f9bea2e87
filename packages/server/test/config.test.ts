import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfigText } from '../src/config/index.js';
import { runGatewayToExit } from './helpers/process.js';

const good = `
providers:
  - id: alpha
    type: openai
    baseUrl: http://127.0.0.1:9101/v1
    apiKey: \${ALPHA_API_KEY}
    region: fr-par
    timeoutMs: 30000
models:
  - id: mistral/small
    kind: chat
    owned_by: mistral
    context_window: 32000
    capabilities: [streaming, tools, json]
    offers:
      - provider: alpha
        upstreamModel: mistral-small-latest
        pricing: { prompt_per_1m: 0.20, completion_per_1m: 0.60, currency: EUR }
`;

describe('config file', () => {
  it('reads the INTERFACES.md example and substitutes $' + '{ENV} references', () => {
    const c = parseConfigText(good, 'gw.yaml', { ALPHA_API_KEY: 'sk-alpha' });
    expect(c.providers[0]?.apiKey).toBe('sk-alpha');
    expect(c.models[0]?.offers[0]?.pricing.prompt_per_1m).toBe(0.2);
  });

  it('names the file, the field path and what was expected', () => {
    const cases: [string, Record<string, string>, RegExp][] = [
      [
        good.replace('type: openai', 'type: grpc'),
        { ALPHA_API_KEY: 'k' },
        /gw\.yaml at \/providers\/0\/type: expected one of "openai", "mistral", "azure", "cohere"/,
      ],
      [good, {}, /gw\.yaml at \/providers\/0\/apiKey: expected environment variable ALPHA_API_KEY to be set/],
      [good.replace('kind: chat', 'kind: video'), { ALPHA_API_KEY: 'k' }, /\/models\/0\/kind/],
      [
        good.replace('provider: alpha', 'provider: beta'),
        { ALPHA_API_KEY: 'k' },
        /\/models\/0\/offers\/0\/provider: expected one of the providers' ids \(alpha\), not beta/,
      ],
      [good.replace('prompt_per_1m: 0.20', 'prompt_per_1m: cheap'), { ALPHA_API_KEY: 'k' }, /\/models\/0\/offers\/0\/pricing\/prompt_per_1m: expected number/],
      ['providers: [', {}, /gw\.yaml at \/: expected valid YAML/],
    ];
    for (const [text, env, message] of cases) {
      expect(() => parseConfigText(text, 'gw.yaml', env)).toThrowError(message);
    }
  });

  it('validates the environment', () => {
    expect(() => loadConfig({ PORT: 'eighty' })).toThrowError(ConfigError);
    expect(() => loadConfig({ DATABASE_URL: 'mysql://x' })).toThrowError(/DATABASE_URL: expected a postgres:\/\/ URL/);
    expect(() => loadConfig({ GW_LOG_LEVEL: 'verbose' })).toThrowError(
      /GW_LOG_LEVEL: expected one of fatal, error, warn, info, debug, trace, silent, not "verbose"/,
    );
    expect(loadConfig({ GW_LOG_LEVEL: 'warn' }).logLevel).toBe('warn');
    expect(loadConfig({}).port).toBe(8080);
    expect(loadConfig({}).registryIntervalS).toBe(21_600);
    // Longer than a Node timer can wait, it would fire every millisecond.
    expect(loadConfig({ GW_REGISTRY_INTERVAL_S: '2147483' }).registryIntervalS).toBe(2_147_483);
    expect(() => loadConfig({ GW_REGISTRY_INTERVAL_S: '2147484' })).toThrowError(/GW_REGISTRY_INTERVAL_S: expected an integer from 1 to 2147483/);
  });

  it('makes GW_UPLOAD_DIR at start, and stops the start if it cannot', () => {
    const base = mkdtempSync(join(tmpdir(), 'gw-upload-dir-'));
    const dir = join(base, 'spool', 'uploads');
    expect(loadConfig({ GW_UPLOAD_DIR: dir }).uploadDir).toBe(dir);
    expect(existsSync(dir)).toBe(true);
    writeFileSync(join(base, 'a-file'), '');
    expect(() => loadConfig({ GW_UPLOAD_DIR: join(base, 'a-file', 'below') })).toThrowError(
      /GW_UPLOAD_DIR: expected a directory the gateway can create and write to/,
    );
    rmSync(base, { recursive: true, force: true });
  });

  it('a bad config stops the process with a clear message, a non-zero exit and no secret', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cfg-'));
    const file = join(dir, 'gw.yaml');
    writeFileSync(file, good.replace('region: fr-par', 'region: 42'));
    const { code, output } = await runGatewayToExit({ GW_CONFIG: file, GW_DATA_DIR: join(dir, 'data'), ALPHA_API_KEY: 'sk-secret-value-123' });
    expect(code).toBe(2);
    expect(output).toContain(file);
    expect(output).toContain('/providers/0/region');
    expect(output).toContain('expected string');
    expect(output).not.toContain('sk-secret-value-123');
  });
});
