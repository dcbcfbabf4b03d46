return {redis.call('pttl', KEYS[1]), redis.call('get', KEYS[2]) or '', redis.call('get', KEYS[3]) or '',
  redis.call('get', KEYS[1]) or ''}