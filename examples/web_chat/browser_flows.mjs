// Drives the web chat page through one flow in a real headless Chromium (the machine's
// /usr/bin/chromium, or CHROMIUM_PATH) with playwright-core, and prints what the page showed
// as JSON:
//
//   node browser_flows.mjs URL FLOW SCREENSHOT_PATH
//
// FLOW is one of
//   error   a prompt whose turn fails, then a prompt that works (the page recovers);
//   stop    a slow answer stopped with the Stop button;
//   resume  a slow answer, and a second tab opened on the same chat while it runs;
//   regenerate  an answer, then the Regenerate button;
//   edit    an answer, then the first message edited and sent again.
import { chromium } from 'playwright-core';

const [url, flow, screenshot] = process.argv.slice(2);
const TIMEOUT = { timeout: 60000 };
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
  ],
});

const consoleErrors = [];

async function open(context, address) {
  const page = await context.newPage({ viewport: { width: 900, height: 700 } });
  page.on('console', message => {
    // A failed request is the point of the error flow; the browser logs it as an error.
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource'))
      consoleErrors.push(message.text());
  });
  page.on('pageerror', error => consoleErrors.push(String(error)));
  await page.goto(address);
  return page;
}

async function send(page, prompt) {
  await page.getByTestId('prompt').fill(prompt);
  await page.getByTestId('send').click();
}

const status = page => page.getByTestId('status').textContent();

async function idle(page) {
  await page.waitForFunction(
    () => ['ready', 'error'].includes(document.querySelector('[data-testid="status"]')?.textContent),
    null,
    TIMEOUT,
  );
}

function shown(page) {
  return page.evaluate(() => ({
    bubbles: [...document.querySelectorAll('[data-role]')].map(node => ({
      role: node.dataset.role,
      text: [...node.querySelectorAll('.text')].map(text => text.textContent).join(''),
    })),
    error: document.querySelector('[data-testid="error"]')?.textContent ?? null,
    send: document.querySelector('[data-testid="send"]') !== null,
    stop: document.querySelector('[data-testid="stop"]') !== null,
    status: document.querySelector('[data-testid="status"]')?.textContent,
  }));
}

const assistantText = text => page =>
  page.waitForFunction(
    expected =>
      [...document.querySelectorAll('[data-role="assistant"] .text')].some(node =>
        node.textContent.includes(expected),
      ),
    text,
    TIMEOUT,
  );

try {
  const context = await browser.newContext();
  const out = { flow };
  if (flow === 'error') {
    const page = await open(context, url);
    await send(page, 'What is the weather in Oslo?');
    await page.getByTestId('error').waitFor(TIMEOUT);
    await idle(page);
    out.failed = await shown(page);
    await send(page, 'What is the weather in Rome?');
    await page.locator('[data-role="assistant"] .usage').waitFor(TIMEOUT);
    await idle(page);
    out.recovered = await shown(page);
    await page.screenshot({ path: screenshot, fullPage: true });
  } else if (flow === 'stop') {
    const page = await open(context, url);
    await send(page, 'Tell me a slow story');
    await assistantText('Once upon a time.')(page);
    out.running = await shown(page);
    await page.getByTestId('stop').click();
    await idle(page);
    out.stopped = await shown(page);
    out.status = await status(page);
    await page.screenshot({ path: screenshot, fullPage: true });
  } else if (flow === 'resume') {
    const first = await open(context, url);
    await send(first, 'Tell me a slow story');
    await assistantText('Once upon a time.')(first);
    out.address = first.url();
    const second = await open(context, out.address);
    await assistantText('Once upon a time.')(second);
    out.resumed = await shown(second);
    await assistantText('The end.')(second);
    await idle(second);
    out.finished = await shown(second);
    await idle(first);
    out.first = await shown(first);
    await second.screenshot({ path: screenshot, fullPage: true });
  } else if (flow === 'regenerate' || flow === 'edit') {
    const page = await open(context, url);
    await send(page, 'What is the weather in Oslo?');
    await page.locator('[data-role="assistant"] .usage').waitFor(TIMEOUT);
    await idle(page);
    out.answered = await shown(page);
    const before = await page.locator('[data-role="assistant"]').getAttribute('data-id');
    if (flow === 'regenerate') {
      await page.getByTestId('regenerate').click();
    } else {
      await page.getByTestId('edit').click();
      out.editing = await page.getByTestId('prompt').inputValue();
      await page.getByTestId('prompt').fill('What is the weather in Lima?');
      await page.getByTestId('send').click();
    }
    // Done when a new answer, other than the first, is complete.
    await page.waitForFunction(
      first => {
        const answer = document.querySelector('[data-role="assistant"]');
        return (
          answer !== null &&
          answer.dataset.id !== first &&
          answer.querySelector('.usage') !== null &&
          document.querySelector('[data-testid="status"]')?.textContent === 'ready'
        );
      },
      before,
      TIMEOUT,
    );
    out.after = await shown(page);
    await page.screenshot({ path: screenshot, fullPage: true });
  } else {
    throw new Error(`unknown flow ${flow}`);
  }
  console.log(JSON.stringify({ ...out, consoleErrors }));
} finally {
  await browser.close();
}
